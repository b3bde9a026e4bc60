"""``delivery.frame_budget.fit_frame``: one frame over the WebSocket budget keeps its shape and
is cut at its longest strings (a 30 MB answer must not close every socket)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delivery.frame_budget import CUT_MARKER, fit_frame, frame_bytes


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def test_a_frame_within_the_budget_is_returned_unchanged():
    text = dumps({"type": "history", "items": [{"content": "x" * 100}]})
    assert fit_frame(text, 1000) is text


def test_the_longest_strings_are_cut_to_one_level_and_short_ones_are_kept():
    frame = {
        "type": "history",
        "session_id": "cli_chat:1:ab",
        "has_more": False,
        "items": [
            {"id": "m1", "content": "a" * 50_000},
            {"id": "m2", "content": "é" * 30_000},
            {"id": "m3", "content": "short"},
        ],
    }
    fitted = json.loads(fit_frame(dumps(frame), 40_000))
    assert frame_bytes(dumps(fitted)) <= 40_000
    assert (fitted["type"], fitted["session_id"], fitted["has_more"]) == ("history", "cli_chat:1:ab", False)
    assert [item["id"] for item in fitted["items"]] == ["m1", "m2", "m3"]
    assert fitted["items"][2]["content"] == "short"
    first, second = fitted["items"][0]["content"], fitted["items"][1]["content"]
    assert first.startswith("a" * 1000) and "characters cut: too large for one WebSocket frame" in first
    assert second.startswith("é" * 1000) and CUT_MARKER.split("{cut}")[1] in second
    cut = int(first.rsplit("… [", 1)[1].split(" ", 1)[0])
    assert len(first.split("… [")[0]) + cut == 50_000, "the marker says how much was cut"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=3000), min_size=1, max_size=30), st.integers(4_000, 40_000))
def test_any_frame_of_strings_is_cut_to_fit_and_stays_json(texts, limit):
    text = dumps({"type": "turn_updated", "turn": {"blocks": [{"text": t} for t in texts]}})
    try:
        fitted = fit_frame(text, limit)
    except ValueError:
        # Only when even the markers cannot fit (many strings, small budget).
        assert len(texts) * len(CUT_MARKER) > limit // 4
        return
    assert frame_bytes(fitted) <= limit
    value = json.loads(fitted)
    assert len(value["turn"]["blocks"]) == len(texts)


@pytest.mark.parametrize("fill", ["\n", '"', "\\", "\x01", "é\n"])
def test_strings_that_grow_when_escaped_are_measured_as_written(fill):
    """A model repeating newlines (2 bytes each in JSON) or control characters (6 bytes) makes a
    frame whose decoded strings are smaller than its excess: strings are measured as they are
    written, so such a frame is still cut, not dropped."""
    frame = {
        "type": "session_history",
        "messages": [{"id": f"m{i}", "content": fill * 300_000} for i in range(9)],
    }
    text = dumps(frame)
    assert frame_bytes(text) > 1_000_000
    fitted = fit_frame(text, 1_000_000)
    assert frame_bytes(fitted) <= 1_000_000
    value = json.loads(fitted)
    assert [m["id"] for m in value["messages"]] == [f"m{i}" for i in range(9)]
    assert all(
        m["content"].startswith(fill * 10) and "characters cut" in m["content"] for m in value["messages"]
    )


def test_a_frame_written_with_ascii_escapes_is_measured_as_we_write_frames():
    frame = {"type": "session_history", "messages": [{"content": "\x01" * 300_000} for _ in range(9)]}
    fitted = fit_frame(json.dumps(frame), 1_000_000)  # ensure_ascii=True: every character 6 bytes
    assert frame_bytes(fitted) <= 1_000_000 and len(json.loads(fitted)["messages"]) == 9


def test_a_frame_that_is_not_json_is_an_error():
    with pytest.raises(ValueError):
        fit_frame("x" * 100, 10)
