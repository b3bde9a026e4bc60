"""A streamed response is bounded in bytes (``MAX_RESPONSE_BYTES``; issue 16 "provider response
size"): past the cap the stream ends with a clear, non-retryable error after the text that
arrived, whatever the bytes were — an event that never ends, or endless comments."""

from __future__ import annotations

import pytest

from providers._http import MAX_RESPONSE_BYTES
from providers.chunks import TextDelta
from providers.errors import BadResponseError
from providers.testing import openai_events, split_events, sse_body
from tests.providers._cases import run_stream
from tests.providers._mock_sse import SSE, _provider, _transport

CAP = 64 * 1024


def opening_text() -> list[bytes]:
    """The first events of an answer: role, then "Hello there" (no end)."""
    return split_events(sse_body(openai_events("Hello there", done=False)[:3]))


ENDLESS = {
    "an event that never ends": [b"data: " + b"x" * 1024] + [b"x" * 1024] * 200,
    "endless comments": [b": keep-alive " + b"." * 1000 + b"\n\n"] * 200,
}


@pytest.mark.parametrize("tail", sorted(ENDLESS))
async def test_a_response_over_the_byte_cap_ends_with_a_clear_error_after_its_text(tail: str):
    provider = _provider("openai", _transport([(200, SSE, opening_text() + ENDLESS[tail])]))
    provider.max_response_bytes = CAP
    result, chunks = await run_stream(provider)
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "Hello there"
    assert result.text == "Hello there"  # kept: the caller stores it as a partial answer
    assert isinstance(result.error, BadResponseError)
    assert not result.error.retryable and f"passed {CAP} bytes" in str(result.error)


async def test_a_response_of_exactly_the_cap_is_untouched():
    body = sse_body(openai_events("word " * 2000))
    assert len(body) < MAX_RESPONSE_BYTES
    provider = _provider("openai", _transport([(200, SSE, split_events(body))]))
    provider.max_response_bytes = len(body)
    result, _ = await run_stream(provider)
    assert result.error is None and result.text.split() == ["word"] * 2000
