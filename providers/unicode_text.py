"""Text that can be encoded: lone surrogates and NUL characters out of model, tool and user text.

Pure (no Django, no httpx). Python strings may hold lone UTF-16 surrogates (U+D800–U+DFFF) that
UTF-8 cannot encode: ``json.loads`` makes one of every ``\\ud83d`` escape without its partner, so
a server that splits an emoji's escaped pair across two SSE events yields two lone surrogates,
and a model may write a lone ``\\ud800`` into a tool argument. Such a string fails wherever it is
encoded — SQLite and PostgreSQL writes, the next provider request, a WebSocket frame — so it is
repaired where text enters: adjacent halves are rejoined into their character, and a surrogate
that is still alone becomes U+FFFD. PostgreSQL text cannot hold NUL either (:func:`scrub_text`).

Cost: every function returns its input unchanged after one C-speed check (``str.isascii``, then a
regex search) when there is nothing to repair; :class:`SurrogateMender` looks at each delta once
(O(1) extra work per delta, never the whole text so far).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from providers.chunks import (
    Done,
    ProviderChunk,
    ProviderStateChunk,
    ReasoningDelta,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
)
from providers.errors import ProviderError

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
_HIGH_SURROGATES = ("\ud800", "\udbff")


def fix_surrogates(text: str) -> str:
    """``text`` with surrogate pairs rejoined (``"\\ud83d\\ude00"`` → ``"😀"``) and every
    remaining lone surrogate replaced by U+FFFD; ``text`` itself when it holds none."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    # UTF-16 with surrogatepass writes each code unit as it is; decoding pairs them again.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def scrub_text(text: str) -> str:
    """``text`` fit for storage: :func:`fix_surrogates`, and NUL characters replaced by U+FFFD
    (PostgreSQL text and jsonb cannot store ``\\x00``)."""
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    return fix_surrogates(text)


def map_strings(value: Any, fix: Callable[[str], str], *, keys: bool = True) -> Any:
    """``value`` with ``fix`` applied to every string in it, dict keys included unless ``keys``
    is False.

    Walks dicts and lists (a JSON value) iteratively, so a deeply nested value cannot overflow the
    stack; returns new containers, never mutates ``value``. Other values (numbers, None, tuples,
    objects) are kept as they are. A value that holds itself (not JSON) is not supported.
    """
    if isinstance(value, str):
        return fix(value)
    if not isinstance(value, (dict, list)):
        return value
    top: dict | list = {} if isinstance(value, dict) else []
    stack: list[tuple[dict | list, dict | list]] = [(value, top)]
    while stack:
        source, target = stack.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in items:
            if isinstance(item, (dict, list)):
                copy: dict | list = {} if isinstance(item, dict) else []
                stack.append((item, copy))
                item = copy
            elif isinstance(item, str):
                item = fix(item)
            if isinstance(target, dict):
                target[fix(key) if keys and isinstance(key, str) else key] = item
            else:
                target.append(item)
    return top


def scrub_value(value: Any) -> Any:
    """``value`` (a string, or a JSON value of dicts and lists) with :func:`scrub_text` applied to
    every string in it (:func:`map_strings`)."""
    return map_strings(value, scrub_text)


class SurrogateMender:
    """Repairs every string of a stream's chunks, one chunk at a time (one per stream; pure).

    A delta (text, reasoning, or one tool call's arguments) that ends with a high surrogate keeps
    it back until the next delta of the same kind: when that starts with the low half, the pair
    is rejoined into one character; the rest of each delta goes through :func:`fix_surrogates`.
    A half still held when the stream ends comes out as U+FFFD (:meth:`finish`).

    Every other string a chunk carries arrives whole and is fixed on its own: a tool call's id
    and name (``ToolCallStart``; the same text always gives the same id, so a repeated start
    and the call's result still pair), the replay state's strings (``ProviderStateChunk``) and
    the finish reason (``Done``). A failure's strings are fixed by :func:`mend_error`.
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[object, str] = {}

    def mend(self, chunk: ProviderChunk) -> ProviderChunk | None:
        """``chunk`` repaired; None when nothing of it is left to pass on yet (a held half)."""
        kind = type(chunk)
        if kind is TextDelta or kind is ReasoningDelta:
            key: object = kind
            text = chunk.text  # type: ignore[union-attr]
        elif kind is ToolCallArgumentsDelta:
            key = chunk.index  # type: ignore[union-attr]
            text = chunk.delta  # type: ignore[union-attr]
        else:
            return _mend_whole(chunk)
        if not self._held and text.isascii():  # the common case
            return chunk
        fixed = self._held.pop(key, "") + text
        if fixed and _HIGH_SURROGATES[0] <= fixed[-1] <= _HIGH_SURROGATES[1]:
            self._held[key] = fixed[-1]
            fixed = fixed[:-1]
        fixed = fix_surrogates(fixed)
        if fixed == text:
            return chunk
        if not fixed:
            return None
        return replace(chunk, delta=fixed) if kind is ToolCallArgumentsDelta else replace(chunk, text=fixed)  # type: ignore[type-var]

    def finish(self) -> list[ProviderChunk]:
        """The halves still held, each as a U+FFFD delta of its kind (``[]`` when none); call it
        before passing on the stream's ``Done``."""
        out: list[ProviderChunk] = []
        for key in self._held:
            if isinstance(key, int):
                out.append(ToolCallArgumentsDelta(key, REPLACEMENT))
            else:
                out.append(key(REPLACEMENT))  # type: ignore[operator]
        self._held.clear()
        return out


def _mend_whole(chunk: ProviderChunk) -> ProviderChunk:
    """A chunk whose strings arrive whole, with each of them fixed (``chunk`` when none needs it)."""
    if isinstance(chunk, ToolCallStart):
        call_id, name = fix_surrogates(chunk.id), fix_surrogates(chunk.name)
        if call_id is chunk.id and name is chunk.name:
            return chunk
        return ToolCallStart(chunk.index, call_id, name)
    if isinstance(chunk, Done):
        reason = chunk.finish_reason
        return chunk if reason is None or fix_surrogates(reason) is reason else Done(fix_surrogates(reason))
    if isinstance(chunk, ProviderStateChunk):
        return ProviderStateChunk(map_strings(chunk.state, fix_surrogates))
    return chunk  # UsageChunk: numbers only


def mend_error(error: ProviderError) -> ProviderError:
    """``error`` with lone surrogates out of the strings it carries (its message, the vendor's code
    and message, the finish reason), changed in place and returned: the message may be shown to the user and is
    logged, and a lone surrogate can be neither framed nor written (module docstring)."""
    message = error.message
    if isinstance(message, str):
        fixed = fix_surrogates(message)
        if fixed is not message:
            error.message = fixed
            error.args = (fixed, *error.args[1:])
    if error.provider_code is not None:
        error.provider_code = map_strings(error.provider_code, fix_surrogates)
    if isinstance(error.provider_message, str):
        error.provider_message = fix_surrogates(error.provider_message)
    if isinstance(error.finish_reason, str):
        error.finish_reason = fix_surrogates(error.finish_reason)
    return error
