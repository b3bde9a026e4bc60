"""Client frames of the cli_chat WebSocket (PROTOCOL.md §1): their limits, parsing and fields.

Pure: no Django, no Channels. ``parse_frame`` turns a text frame into a dict or raises
``FrameError``, which the consumer answers with an ``error`` frame (the connection stays open).
"""

from __future__ import annotations

import json
import math
import re

from conversations.agent.inbound import is_blank
from providers.json_depth import MAX_JSON_DEPTH, text_too_deep
from providers.unicode_text import fix_surrogates, map_strings

MAX_FRAME_CHARS = 64 * 1024
MAX_MEDIA_FRAME_CHARS = 8 * 1024 * 1024
MAX_CONTENT_CHARS = 32_000
MAX_CLIENT_MSG_ID = 64
MAX_HISTORY_LIMIT = 200
MAX_SESSIONS_LIMIT = 100
DEFAULT_SESSIONS_LIMIT = 10
MAX_SESSIONS_OFFSET = 1_000_000
MAX_SESSIONS_QUERY = 200  # a title's own limit
MAX_SEQ = 2**53  # JavaScript's safe integers; also below PostgreSQL's bigint
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class FrameError(Exception):
    """A client frame is invalid; answered with an ``error`` frame, the connection stays open."""

    def __init__(self, code: str, message: str, client_msg_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.client_msg_id = client_msg_id


def _not_json(constant: str) -> None:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's json reads them, JSON has none (an echoed
    ``1e999`` nonce went back as ``Infinity``, which a browser's ``JSON.parse`` refuses)."""
    raise ValueError(f"{constant} is not JSON")


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent; one beyond a double's range (``1e999``) would
    be ``inf``, which JSON cannot carry back."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def parse_frame(text_data: str | None) -> dict:
    """The frame as a dict with a string ``type``; lone surrogate escapes become U+FFFD.

    Raises:
        FrameError: ``invalid_frame`` (not text, not an object with a ``type``), ``invalid_json``
            (not JSON — ``NaN`` and ``Infinity`` neither, nor a number too large for a double —
            or nested deeper than ``json_depth.MAX_JSON_DEPTH``), ``frame_too_large``
            (over 64 KiB, or 8 MiB for a ``message`` with ``media``).
    """
    if text_data is None:
        raise FrameError("invalid_frame", "frames must be JSON text frames")
    if len(text_data) > MAX_MEDIA_FRAME_CHARS:
        raise FrameError("frame_too_large", "frame exceeds 8 MiB")
    # Frames nest 3 deep; json.loads recurses and would raise RecursionError.
    if text_too_deep(text_data, MAX_JSON_DEPTH):
        raise FrameError("invalid_json", f"frame nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        frame = json.loads(text_data, parse_constant=_not_json, parse_float=_finite_float)
    except ValueError:
        raise FrameError("invalid_json", "frame is not valid JSON") from None
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise FrameError("invalid_frame", 'a frame is a JSON object with a string "type"')
    if _SURROGATE_ESCAPE.search(text_data):
        # "\ud800" escapes make lone surrogates: nothing could echo, store or query them
        # (Daphne closed the socket on the echoed client_msg_id). Pairs are rejoined.
        frame = map_strings(frame, fix_surrogates)
    if len(text_data) > MAX_FRAME_CHARS and not (frame["type"] == "message" and frame.get("media")):
        raise FrameError("frame_too_large", "frame exceeds 64 KiB")
    return frame


def optional_str(frame: dict, key: str, max_len: int) -> str | None:
    """``frame[key]``: None when absent, else a non-blank printable string of at most ``max_len``
    characters (``FrameError`` ``invalid_frame`` otherwise)."""
    value = frame.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or is_blank(value) or len(value) > max_len or not value.isprintable():
        raise FrameError(
            "invalid_frame", f"{key} must be a non-blank printable string of at most {max_len} characters"
        )
    return value


def message_content(frame: dict, client_msg_id: str | None = None) -> str:
    """The text of a ``message`` frame (PROTOCOL §1): at most 32 000 characters, not blank
    unless the frame carries ``media`` — an image-only message, whose text is then "".

    Raises:
        FrameError: ``invalid_frame`` (not a string, or blank without media),
            ``content_too_long``; both name ``client_msg_id``.
    """
    content = frame.get("content")
    if content is None and frame.get("media"):
        content = ""
    if not isinstance(content, str):
        raise FrameError("invalid_frame", "content must be a string", client_msg_id)
    if is_blank(content):
        if frame.get("media"):
            return ""
        raise FrameError("invalid_frame", "content must be a non-blank string", client_msg_id)
    if len(content) > MAX_CONTENT_CHARS:
        raise FrameError("content_too_long", f"content exceeds {MAX_CONTENT_CHARS} characters", client_msg_id)
    return content


def optional_int(frame: dict, key: str, low: int, high: int | None = None) -> int | None:
    """``frame[key]``: None when absent, else an integer (not a bool) in ``[low, high]``
    (``FrameError`` ``invalid_frame`` otherwise)."""
    value = frame.get(key)
    if value is None:
        return None
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < low
        or (high is not None and value > high)
    ):
        bound = f" and at most {high}" if high is not None else ""
        raise FrameError("invalid_frame", f"{key} must be an integer of at least {low}{bound}")
    return value


def sessions_request(frame: dict) -> dict:
    """The paging of a ``sessions`` frame as ``{limit, offset, query}`` (PROTOCOL §1).

    ``limit`` 1–100 (default 10), ``offset`` ≥ 0 (default 0), ``query`` a title search of at
    most 200 characters; a blank ``query`` means none (a cleared search box). Raises
    ``FrameError`` ``invalid_frame`` for any other value.
    """
    query = frame.get("query")
    if query is not None and (not isinstance(query, str) or len(query) > MAX_SESSIONS_QUERY):
        raise FrameError(
            "invalid_frame", f"query must be a string of at most {MAX_SESSIONS_QUERY} characters"
        )
    return {
        "limit": optional_int(frame, "limit", 1, MAX_SESSIONS_LIMIT) or DEFAULT_SESSIONS_LIMIT,
        "offset": optional_int(frame, "offset", 0, MAX_SESSIONS_OFFSET) or 0,
        "query": (query or "").strip() or None,
    }


def placeholder_snapshot(item: dict) -> dict:
    """A running turn known only from its inbox row (revision 0, phase queued): ``ready.running``
    and the REST ``…/turn`` use it until the owning worker sends the real snapshot."""
    return {
        "id": item["turn_id"],
        "session_id": item["session_id"],
        "message_id": item["message_id"],
        "revision": 0,
        "status": "running",
        "phase": "queued",
        "blocks": [],
        "usage": None,
        "error": None,
    }
