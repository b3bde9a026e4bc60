"""Text fit for the server log: the deployment's secrets, one inert line, bounded (seed 000 §13).

Pure: the deployment's secrets come from the sources registered with :func:`add_secret_source`
(the Django app registers its settings: ``conversations.apps``). :func:`log_safe` is the one way a
raw cause (a provider body, a storage error, a tool's message, a traceback) reaches a log line:
redacted (``providers.redaction``), made :func:`one_line`, at most a bound long. Rules:
``agent/README.md``.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Iterable

from providers.redaction import redact
from providers.unicode_text import fix_surrogates

__all__ = [
    "add_secret_source",
    "configured_secrets",
    "describe_exception",
    "head_and_tail",
    "log_safe",
    "one_line",
]

#: Bound of one logged text (a traceback can be long; the log needs its tail).
MAX_LOG_CHARS = 8000

_secret_sources: list[Callable[[], Iterable[str]]] = []


def add_secret_source(source: Callable[[], Iterable[str]]) -> None:
    """Register a callable that returns secrets of this deployment (read at every redaction, so
    a changed setting counts); registering the same callable again does nothing."""
    if source not in _secret_sources:
        _secret_sources.append(source)


def configured_secrets() -> tuple[str, ...]:
    """The secrets this deployment is configured with (the LLM API key, Django's SECRET_KEY), from
    the registered sources; a source that fails gives nothing (a unit test without settings)."""
    values: list[str] = []
    for source in _secret_sources:
        try:
            values.extend(source())
        except Exception:  # noqa: BLE001, S112 - nothing known to hide from it
            continue
    return tuple(v for v in values if isinstance(v, str) and v)


# C0 and C1 controls (ESC starts ANSI sequences), line/paragraph separators, and the bidi
# embeddings, overrides, isolates and marks that reorder what a terminal or a page shows.
_UNSAFE_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def one_line(text: str) -> str:
    """``text`` as one inert line, whatever a provider body held: CR, LF and tab escaped
    (``\\n``), every other C0/C1 control (so ANSI escape sequences: ``\\u001b[31m``), line and
    paragraph separators and bidi override/isolate/mark characters (U+202A–202E, U+2066–2069)
    escaped as ``\\uXXXX``, so it can neither forge log lines nor recolour or reorder them; lone
    surrogates become U+FFFD (``unicode_text.fix_surrogates``), so it can be encoded."""
    return fix_surrogates(_UNSAFE_CHARS.sub(_escape_char, text))


def log_safe(text: str, limit: int = MAX_LOG_CHARS) -> str:
    """``text`` fit for one log line: credentials redacted (:func:`redact` with the configured
    secrets), made :func:`one_line` (so a traceback is one line too: ``\\n`` escaped), at most
    ``limit`` characters — a long one keeps its head and its tail (a traceback's last line names
    the exception)."""
    return head_and_tail(one_line(redact(text, configured_secrets())), limit)


def head_and_tail(text: str, limit: int) -> str:
    """``text``, or its head and its tail around ``" […] "`` when longer than ``limit``."""
    if len(text) <= limit:
        return text
    half = max(1, (limit - 5) // 2)
    return f"{text[:half]} […] {text[-half:]}"


def describe_exception(exc: BaseException, *, with_traceback: bool = False) -> str:
    """``Type: message`` of ``exc`` and its causes (or its formatted traceback), unredacted."""
    if with_traceback:
        return "".join(traceback.format_exception(exc)).rstrip()
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(parts) < 5:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return " <- caused by ".join(parts)
