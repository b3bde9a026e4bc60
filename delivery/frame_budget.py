"""Fit one outgoing JSON frame into a byte budget by cutting its longest strings (pure; no Django).

A WebSocket server refuses to send a message over its payload limit (Daphne: it closes the
connection with 1011), so one oversized frame — a history page of huge rows, a snapshot of an
answer a misbehaving server streamed without end, a ``turn_committed`` with megabytes of tool
arguments — would cut every client of the chat off, and a reconnect would fetch the same frame
again. :func:`fit_frame` keeps the frame's shape and every field, and cuts only the longest
strings, each to the same length ("water-filling"), with a marker saying how much was cut; the
full text stays in the database (REST history, ``manage.py export``).

Cost: one parse, one pass over the strings and one serialisation per round; at most
:data:`MAX_ROUNDS` rounds. Only frames over the budget pay it.
"""

from __future__ import annotations

import json
from typing import Any

from providers.unicode_text import map_strings

CUT_MARKER = (
    "… [{cut} characters cut: too large for one WebSocket frame; the full text is in the history API]"
)
"""Appended to every cut string (``{cut}``: how many characters were removed)."""
MAX_ROUNDS = 4


def frame_bytes(text: str) -> int:
    """UTF-8 size of ``text`` in bytes (lone surrogates counted as 3, as they would be escaped)."""
    return len(text.encode("utf-8", "surrogatepass"))


def fit_frame(text: str, limit: int) -> str:
    """``text`` (a JSON object's text) when it is at most ``limit`` UTF-8 bytes; otherwise the same
    JSON with its longest strings cut (:data:`CUT_MARKER`) until it fits.

    Raises:
        ValueError: ``text`` is not JSON, or even cutting every string to the marker cannot make
            it fit (a frame of millions of short values — no frame we send has that shape).
    """
    size = frame_bytes(text)
    if size <= limit:
        return text
    value = json.loads(text)
    # Measured as we write it (UTF-8 kept, compact): a text written with \\u escapes shrinks here.
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    size = frame_bytes(text)
    if size <= limit:
        return text
    for _ in range(MAX_ROUNDS):
        excess = size - limit
        strings = _string_lengths(value)
        # Room for the markers the cut strings gain, and for rounding, as far as the strings give it.
        marker_room = len(CUT_MARKER) + 12
        margin = 1024 + marker_room * sum(1 for length in strings if length > marker_room)
        cap = _water_level(strings, min(excess + margin, max(excess, sum(strings))))
        if cap is None:
            break
        value = _cut_strings(value, cap)
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        size = frame_bytes(text)
        if size <= limit:
            return text
    raise ValueError(f"a frame of {size} bytes cannot be cut to {limit} bytes")


def _walk(value: Any):
    """Every string value in ``value`` (not keys), iteratively."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def json_size(text: str) -> int:
    """Bytes ``text`` takes written as a JSON string, quotes left out: escapes count (``\\n`` 2,
    a control character ``\\u0001`` 6), other characters their UTF-8 size."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text)  # the common case: nothing to escape
    return frame_bytes(json.dumps(text, ensure_ascii=False)) - 2


def _string_lengths(value: Any) -> list[int]:
    """JSON sizes (bytes, :func:`json_size`) of every string value, longest first."""
    return sorted((json_size(s) for s in _walk(value)), reverse=True)


def _water_level(lengths: list[int], remove: int) -> int | None:
    """The largest size ``cap`` (bytes) such that cutting every string longer than ``cap`` down to
    it removes at least ``remove`` bytes; None when even ``cap = 0`` is not enough or the cut
    would leave nothing worth keeping."""
    removed = 0
    for index, length in enumerate(lengths):
        following = lengths[index + 1] if index + 1 < len(lengths) else 0
        # Lowering the cap from `length` to `following` removes (length - following) from each of
        # the index + 1 longest strings.
        step = (length - following) * (index + 1)
        if removed + step >= remove:
            return max(0, length - (remove - removed + index) // (index + 1))
        removed += step
    return None


def _cut_strings(value: Any, cap: int) -> Any:
    """A copy of ``value`` with every string whose JSON size is over ``cap`` bytes (plus the
    marker's room) cut to a prefix of at most ``cap`` bytes written as JSON."""
    marker_room = len(CUT_MARKER) + 12

    def cut(text: str) -> str:
        if 6 * len(text) <= cap + marker_room:
            return text  # at most 6 bytes a character written as JSON: cannot be over
        size = json_size(text)
        if size <= cap + marker_room:
            return text
        keep = cap * len(text) // size  # the average size per character, then checked
        while keep and json_size(text[:keep]) > cap:
            keep = keep * 7 // 8
        kept = text[:keep]
        return kept + CUT_MARKER.format(cut=len(text) - len(kept))

    return map_strings(value, cut, keys=False)  # keys are the frame's shape: never cut
