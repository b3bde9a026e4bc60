"""Server-sent events from a byte stream, framed by httpx-sse's pure decoders.

Bytes are decoded with one incremental UTF-8 decoder for the whole response (a character split
between reads stays intact: SC-13; a leading BOM is dropped), lines are split by
``httpx_sse``'s ``SSELineDecoder`` (``\\r\\n``, ``\\r``, ``\\n``) and events assembled by its
``SSEDecoder`` (comments ignored, ``data:`` with or without the space, ``retry``/``id`` kept in
SSE state only: SC-14, SC-15, SC-17).

Fast path: a read that is nothing but whole one-line ``data:`` events (``data: {…}\\n\\n``, what
servers send, usually one event per read), arriving at an event boundary, is split here directly
into the same events httpx-sse would produce; anything else (comments, ``event:``/``id:``/
``retry:`` fields, CR, multi-line data, a partial event) goes through httpx-sse's decoders. The
per-line decoders were about a quarter of our per-event time (bench/bench_stream_parse.py).

End of body (RC-12 vs SC-19): the spec drops an event that was not ended by a blank line. Real
servers often omit the final blank line, so a pending event whose data is *complete* (parses as
JSON, or is ``[DONE]``) is still dispatched; an unterminated partial one is dropped.

Pure apart from iterating the given async byte iterator.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

from httpx_sse import ServerSentEvent
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

__all__ = ["ServerSentEvent", "SSEEventReader", "aiter_sse_events", "event_json"]

_raw_decode = json.JSONDecoder().raw_decode


def event_json(data: str) -> Any:
    """The JSON value of an event's ``data`` that has no surrounding whitespace.

    Same result and errors as ``json.loads`` (the hot path, once per event: skipping
    ``json.loads``' argument checks and whitespace regexes saves about a quarter of the JSON
    time on small chunks, bench/bench_stream_parse.py).

    Raises:
        ValueError: ``data`` is not exactly one JSON value, or it nests too deeply for the
            (recursive) decoder: a hostile event must not raise ``RecursionError`` out of a parser.
    """
    try:
        value, end = _raw_decode(data)
    except RecursionError:
        raise ValueError("the JSON value nests too deeply") from None
    if end != len(data):
        raise ValueError(f"extra data after the JSON value at {end}")
    return value


def _whole_data_events(text: str) -> list[ServerSentEvent] | None:
    """The events of ``text`` if it is only ``data: <line>\\n\\n`` events, else None.

    Equal to httpx-sse's result for such text from an idle decoder that has never seen an
    ``id`` (the event type is then ``message`` and the id ``""``). Touches no state.
    """
    if "\r" in text:
        return None
    events = []
    for block in text[:-2].split("\n\n"):
        if block[:5] != "data:" or "\n" in block:
            return None
        events.append(ServerSentEvent(data=block[6:] if block[5:6] == " " else block[5:]))
    return events


def _is_complete(data: str) -> bool:
    if data.strip() == "[DONE]":
        return True
    try:
        json.loads(data)
    except (ValueError, RecursionError):
        return False
    return True


class SSEEventReader:
    """Incremental bytes → :class:`ServerSentEvent` (push style, for sync or async callers)."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._lines = SSELineDecoder()
        self._events = SSEDecoder()
        # The fast path's preconditions: the decoders hold no partial line or event (the text
        # so far ended with a blank line) and no event so far carried an id (ids persist).
        self._at_boundary = True
        self._saw_id = False

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """Consume one read; returns the events it completed (possibly none)."""
        text = self._text.decode(data)
        if not text:
            return []
        ends_event = text.endswith("\n\n")
        if ends_event and self._at_boundary:
            fast = _whole_data_events(text)
            if fast is not None:
                return fast
        decode = self._events.decode
        events = []
        for line in self._lines.decode(text):
            event = decode(line)
            if event is not None:
                events.append(event)
                self._saw_id = self._saw_id or bool(event.id)
        self._at_boundary = ends_event and not self._saw_id
        return events

    def close(self) -> list[ServerSentEvent]:
        """End of body: returns the last pending event if it is complete (see module doc)."""
        events = list(self._decode(self._text.decode(b"", final=True)))
        for line in self._lines.flush():
            event = self._events.decode(line)
            if event is not None:
                events.append(event)
        pending = self._events.decode("")
        if pending is not None and _is_complete(pending.data):
            events.append(pending)
        return events

    def _decode(self, text: str) -> Iterator[ServerSentEvent]:
        if not text:
            return
        for line in self._lines.decode(text):
            event = self._events.decode(line)
            if event is not None:
                yield event


async def aiter_sse_events(chunks: AsyncIterable[bytes]) -> AsyncIterator[ServerSentEvent]:
    """Yield the events of a body given as async byte chunks (any split)."""
    reader = SSEEventReader()
    async for chunk in chunks:
        for event in reader.feed(chunk):
            yield event
    for event in reader.close():
        yield event


def iter_sse_events(chunks: Iterable[bytes]) -> Iterator[ServerSentEvent]:
    """Synchronous twin of :func:`aiter_sse_events` (tests, tools)."""
    reader = SSEEventReader()
    for chunk in chunks:
        yield from reader.feed(chunk)
    yield from reader.close()
