"""Server-sent events from a byte stream, framed by httpx-sse's pure decoders.

Bytes are decoded with one incremental UTF-8 decoder for the whole response (a character split
between reads stays intact: SC-13; a leading BOM is dropped), lines are split by
``httpx_sse``'s ``SSELineDecoder`` (``\\r\\n``, ``\\r``, ``\\n``) and events assembled by its
``SSEDecoder`` (comments ignored, ``data:`` with or without the space, ``retry``/``id`` kept in
SSE state only: SC-14, SC-15, SC-17).

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
        ValueError: ``data`` is not exactly one JSON value.
    """
    value, end = _raw_decode(data)
    if end != len(data):
        raise ValueError(f"extra data after the JSON value at {end}")
    return value


def _is_complete(data: str) -> bool:
    if data.strip() == "[DONE]":
        return True
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


class SSEEventReader:
    """Incremental bytes → :class:`ServerSentEvent` (push style, for sync or async callers)."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._lines = SSELineDecoder()
        self._events = SSEDecoder()

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """Consume one read; returns the events it completed (possibly none)."""
        text = self._text.decode(data)
        if not text:
            return []
        decode = self._events.decode
        events = []
        for line in self._lines.decode(text):
            event = decode(line)
            if event is not None:
                events.append(event)
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
