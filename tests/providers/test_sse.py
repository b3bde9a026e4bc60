"""SSE framing over arbitrary byte splits (httpx-sse decoders + our end-of-body rule)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from providers.sse import SSEEventReader, aiter_sse_events, iter_sse_events

BODY = (
    "retry: 3000\r\n\r\n"
    ": comment\n\n"
    'data: {"a": "你好 🌍"}\n\n'
    "event: ping\ndata:\n\n"
    "data:first\ndata: second\r\n\r\n"
    "data: [DONE]\n\n"
).encode()


def events(pieces: list[bytes]) -> list[tuple[str, str]]:
    return [(e.event, e.data) for e in iter_sse_events(pieces)]


def test_spec_fields_comments_and_line_endings() -> None:
    assert events([BODY]) == [
        ("message", ""),  # the retry-only event: skipped later at the JSON layer
        ("message", '{"a": "你好 🌍"}'),
        ("ping", ""),
        ("message", "first\nsecond"),
        ("message", "[DONE]"),
    ]


@given(st.lists(st.integers(0, len(BODY)), max_size=10))
def test_any_byte_split_gives_the_same_events(cuts: list[int]) -> None:
    points = sorted(cuts)
    pieces = [BODY[a:b] for a, b in zip([0, *points], [*points, len(BODY)], strict=True)]
    assert events(pieces) == events([BODY])


def test_a_complete_pending_event_at_eof_is_dispatched() -> None:
    assert events([b'data: {"type":"message_stop"}']) == [("message", '{"type":"message_stop"}')]
    assert events([b'event: message_stop\ndata: {"type":"message_stop"}\n']) == [
        ("message_stop", '{"type":"message_stop"}')
    ]
    assert events([b"data: [DONE]"]) == [("message", "[DONE]")]


def test_an_unterminated_partial_event_at_eof_is_dropped() -> None:
    assert events([b'data: {"ok": 1}\n\ndata: {"id":"chatcmpl-sc19","object":"chat.compl']) == [
        ("message", '{"ok": 1}')
    ]


def test_a_leading_bom_is_ignored() -> None:
    assert events([b"\xef\xbb", b"\xbfdata: 1\n\n"]) == [("message", "1")]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert events([b"data: \xff\n\n"]) == [("message", "\ufffd")]


async def test_async_iteration_matches() -> None:
    async def chunks():
        for i in range(len(BODY)):
            yield BODY[i : i + 1]

    got = [(e.event, e.data) async for e in aiter_sse_events(chunks())]
    assert got == events([BODY])


def test_reader_is_push_style() -> None:
    reader = SSEEventReader()
    assert reader.feed(b"data: 1") == []
    assert [e.data for e in reader.feed(b"\n\n")] == ["1"]
    assert reader.close() == []
