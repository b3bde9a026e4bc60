"""``parse_frame``: what is JSON and what is not (PROTOCOL §1 "Bad input")."""

from __future__ import annotations

import pytest

from conversations.chat.frames import FrameError, parse_frame


@pytest.mark.parametrize(
    "text",
    [
        '{"type": "ping", "nonce": NaN}',
        '{"type": "ping", "nonce": Infinity}',
        '{"type": "ping", "nonce": -Infinity}',
        '{"type": "ping", "nonce": 1e999}',
        '{"type": "ping", "nonce": -1.5e400}',
    ],
)
def test_numbers_json_cannot_carry_are_invalid_json(text):
    """Python's json reads them; echoed back (a pong's nonce) they made a frame no browser parses."""
    with pytest.raises(FrameError) as caught:
        parse_frame(text)
    assert caught.value.code == "invalid_json"


def test_ordinary_numbers_still_parse():
    frame = parse_frame(
        '{"type": "ping", "nonce": 1.5e300, "n": -0.25, "big": 123456789012345678901234567890}'
    )
    assert (
        frame["nonce"] == 1.5e300 and frame["n"] == -0.25 and frame["big"] == 123456789012345678901234567890
    )
