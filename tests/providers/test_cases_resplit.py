"""Every case in tests/cases over real HTTP, re-split at byte positions chosen by hypothesis.

``test_cases.py`` reads each body whole, per event and byte by byte (MockTransport), and
``test_real_http.py`` serves each in fixed 3-byte chunks; here hypothesis chooses where the body
is cut, biased towards the awkward places: inside multi-byte UTF-8 sequences, around line ends,
and just after ``data:``. Each piece is one HTTP chunk from :class:`LocalSSEServer`, so httpx2's
real connection and chunked decoding run under the parsers (h11 never joins two chunks: the
parser sees at least these cuts). Every split must give exactly the case's expected result.

The SSE reader's fast path (whole ``data:`` events split without httpx-sse's line decoders,
providers/sse.py) is checked the same way: at any split of any body, including generated SSE
with every field kind, it must frame exactly the events httpx-sse's decoders frame alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from unittest import mock

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from providers.chunks import ProviderChunk
from providers.sse import SSEEventReader
from providers.testing import LocalSSEServer, SSEResponse, split_events
from providers.types import AssistantResponse
from tests.providers._cases import (
    Case,
    assert_matches,
    case_ids,
    load_case,
    make_provider,
    normalise,
    run_stream,
)
from tests.providers.test_cases import _extra_assertions

EXAMPLES_PER_CASE = 25


def _inside_utf8(body: bytes) -> list[int]:
    """Cut positions that split a multi-byte UTF-8 character (just before a continuation byte)."""
    return [i for i in range(1, len(body)) if body[i] & 0xC0 == 0x80]


def _framing(body: bytes) -> list[int]:
    """Cut positions next to SSE framing: around CR and LF, just after ``:``."""
    return [i for i in range(1, len(body)) if body[i] in b"\r\n" or body[i - 1] in b"\r\n:"]


def _pieces(body: bytes, points: list[int]) -> list[bytes]:
    bounds = [0, *sorted(points), len(body)]
    return [body[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def cuts(body: bytes) -> st.SearchStrategy[list[bytes]]:
    """``body`` cut at 0–40 positions, each anywhere, inside a character, or at the framing."""
    kinds = [st.integers(1, len(body) - 1)]
    kinds += [st.sampled_from(points) for points in (_inside_utf8(body), _framing(body)) if points]
    points = st.lists(st.one_of(kinds), max_size=40, unique=True)
    return points.map(lambda points: _pieces(body, points))


def test_cut_positions_include_every_split_inside_a_multibyte_character() -> None:
    body = "data: é🌍\n\n".encode()  # é is 2 bytes at 6, 🌍 is 4 bytes at 8
    assert _inside_utf8(body) == [7, 9, 10, 11]
    for i in _inside_utf8(body):
        with pytest.raises(UnicodeDecodeError):
            body[:i].decode()
    assert _pieces(body, [9, 7]) == [b"data: \xc3", b"\xa9\xf0", b"\x9f\x8c\x8d\n\n"]


async def _serve_and_stream(case: Case, pieces: list[bytes]) -> tuple[AssistantResponse, list[ProviderChunk]]:
    response = SSEResponse(case.status, case.headers, pieces)
    async with LocalSSEServer([response]) as server:
        # The transport httpx2 would build itself, minus loading the CA bundle (~25 ms a client,
        # most of this file's run time); the server is plain HTTP on loopback.
        transport = httpx2.AsyncHTTPTransport(verify=False)
        provider = make_provider(case.id, base_url=server.base_url, transport=transport)
        result, chunks = await run_stream(provider)
        assert len(server.requests) == 1, "a case is one response: no retry may happen"
    return result, chunks


@pytest.mark.parametrize("case_id", case_ids())
@settings(
    max_examples=EXAMPLES_PER_CASE,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_case_resplit_at_random_bytes_over_real_http(case_id: str, data: st.DataObject) -> None:
    case = load_case(case_id)
    pieces = data.draw(cuts(case.body), label="pieces")
    result, chunks = asyncio.run(_serve_and_stream(case, pieces))
    where = f"{case_id} (piece sizes {[len(p) for p in pieces]})"
    assert_matches(normalise(result), case.expected, where)
    _extra_assertions(case_id, result, chunks, where)


# --- the SSE reader's fast path ------------------------------------------------------------------

_VALUE = st.lists(st.sampled_from(["x", "{}", "é", "🌍", " ", ":", "[DONE]"]), max_size=4).map("".join)
_LINE = st.one_of(
    _VALUE.map(lambda v: "data: " + v),
    _VALUE.map(lambda v: "data:" + v),
    st.sampled_from(["data", "id: 7", "id:", "event: error", "retry: 5", ": keep-alive", ""]),
)
_EOL = st.sampled_from(["\n", "\n", "\n", "\r\n", "\r"])


@st.composite
def sse_bodies(draw: st.DrawFn) -> bytes:
    """SSE text of every field kind: mostly whole ``data:`` events, with ids, comments, CR/LF
    mixes, multi-line events, extra blank lines and sometimes an unfinished last event."""
    parts = []
    for _ in range(draw(st.integers(1, 8))):
        for line in draw(st.lists(_LINE, min_size=1, max_size=3)):
            parts.append(line + draw(_EOL))
        parts.append(draw(_EOL))
    return "".join(parts).encode()[: None if draw(st.booleans()) else -1]


def _frames(pieces: list[bytes], *, fast_path: bool) -> list[tuple[str, str, str, int | None]]:
    """The events our reader makes of ``pieces``, with or without its fast path."""
    off = mock.patch("providers.sse._whole_data_events", return_value=None)
    reader = SSEEventReader()
    with contextlib.nullcontext() if fast_path else off:
        events = [e for piece in pieces for e in reader.feed(piece)] + reader.close()
    return [(e.event, e.data, e.id, e.retry) for e in events]


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_sse_fast_path_frames_exactly_like_httpx_sse_at_any_split(data: st.DataObject) -> None:
    body = data.draw(
        st.one_of(sse_bodies(), st.sampled_from(case_ids()).map(lambda case_id: load_case(case_id).body)),
        label="body",
    )
    # Whole, one read per event (the fast path's home), or cut anywhere.
    whole_or_events = st.sampled_from([[body], split_events(body)])
    pieces = data.draw(st.one_of(whole_or_events, cuts(body)) if len(body) > 1 else st.just([body]))
    assert _frames(pieces, fast_path=True) == _frames([body], fast_path=False)


@pytest.mark.parametrize(
    "body",
    [
        b"id: 7\n\ndata: a\n\ndata: b\n\n",  # ids persist into later events
        b"id: 7\n\nid:\n\ndata: x\n\n",  # ...until an empty id resets them
        b"data: x\r\n\ndata: y\n\n",  # CRLF then LF
        b"data: a\ndata: b\n\n",  # two data lines, one event
        b"event: error\ndata: x\n\n",
        b": keep-alive\n\ndata: x\n\n",
        b"retry: 5\n\ndata:x\n\n",
        b"data: x\n\n\n\ndata: y\n\n",
        b"data\n\ndata:\n\n",
    ],
)
def test_sse_fast_path_leaves_every_other_shape_to_httpx_sse(body: bytes) -> None:
    for pieces in ([body], split_events(body), [body[i : i + 1] for i in range(len(body))]):
        assert _frames(pieces, fast_path=True) == _frames([body], fast_path=False), pieces
