"""Classify vendor error bodies into typed errors (pure: shared by the vendor modules).

Shapes understood (all seen in the wild):

* OpenAI / OpenRouter: ``{"error": {"message", "type", "code", "param"}}`` (``code`` may be a
  string, an int or null)
* Anthropic: ``{"type": "error", "error": {"type": "rate_limit_error", "message"}}``
* vLLM / SGLang: ``{"object": "error", "message", "type", "code"}``
* plain: ``{"message": …}``, ``{"detail": …}``, a bare string, ``null``
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from providers._overflow_sizes import overflow_sizes
from providers.errors import (
    AuthenticationError,
    BadResponseError,
    ContextOverflowError,
    InBandError,
    OverloadedError,
    ProviderError,
    RateLimitedError,
    ServerError,
    parse_retry_after,
)
from providers.json_depth import value_too_deep

_OVERFLOW_CODES = frozenset(
    {
        "context_length_exceeded",
        "context_window_exceeded",
        "string_above_max_length",
        "exceed_context_size_error",
    }
)
# Known phrasings: OpenAI "This model's maximum context length is …" / code
# context_length_exceeded; Anthropic "prompt is too long: … > … maximum" and "input length and
# `max_tokens` exceed context limit: …"; llama.cpp "exceeds the available context size"
# (type exceed_context_size_error); xAI "maximum prompt length"; vLLM/OpenRouter/Gemini variants;
# vLLM "… is longer than the maximum model length of N"; Qwen DashScope "Range of input length
# should be [1, N]" (code InvalidParameter).
_OVERFLOW_TEXT = re.compile(
    r"context[ _-]?(length|window|limit)|maximum context|prompt is too long|input is too long|"
    r"reduce the length|too many (input )?tokens|exceeds? (the )?(model'?s? )?(max|maximum|context)|"
    r"exceeds the available context|maximum prompt length|exceed_context_size|"
    r"longer than the maximum model length|range of input length should be",
    re.IGNORECASE,
)
_MAX_MESSAGE_CHARS = 500


def error_info(obj: Any) -> tuple[str | None, Any]:
    """``(message, provider_code)`` of an error body; code is ``code`` if set, else ``type``.

    Returns:
        ``(None, None)`` when ``obj`` has no recognisable error.
    """
    if isinstance(obj, str):
        return clean_message(obj) or None, None
    if isinstance(obj, list) and len(obj) == 1:  # Gemini's OpenAI endpoint: [{"error": {...}}]
        obj = obj[0]
    if not isinstance(obj, Mapping):
        return None, None
    inner = obj.get("error")
    if isinstance(inner, str):
        return clean_message(inner) or None, obj.get("code")
    if isinstance(inner, Mapping):
        source: Mapping[str, Any] = inner
    elif obj.get("object") == "error" or "message" in obj or "detail" in obj:
        source = obj
    else:
        return None, None
    message = source.get("message", source.get("detail"))
    if message is not None and not isinstance(message, str):
        # json.dumps recurses: a runaway structure is not shown (json_depth).
        message = (
            "(a nested error message)" if value_too_deep(message) else json.dumps(message, ensure_ascii=False)
        )
    code = source.get("code")
    if code is None:
        kind = source.get("type")
        code = kind if kind != "error" else None
    return clean_message(message or "") or None, code


_HTML = re.compile(r"^\s*(<!doctype\s+html|<html|<head|<body|<\?xml|<[a-z][a-z0-9]*[\s>])", re.IGNORECASE)
_HTML_TITLE = re.compile(r"<(title|h1)[^>]*>(.*?)</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")


def clean_message(text: str, *, status: int | None = None) -> str:
    """A short, user-presentable message: an HTML page is summarised (``HTTP 502 with an HTML
    body: 502 Bad Gateway``) instead of passing markup on; at most 500 characters."""
    if _HTML.match(text):
        match = _HTML_TITLE.search(text)
        title = " ".join(_TAG.sub(" ", match.group(2)).split())[:120] if match else ""
        lead = f"HTTP {status} with an HTML body" if status else "an HTML body"
        text = f"{lead}: {title}" if title else lead
    return text[:_MAX_MESSAGE_CHARS]


def error_from_unframed(status: int, body: bytes) -> ProviderError | None:
    """The error a JSON error body sent as ``text/event-stream`` without ``data:`` framing
    carries (no SSE event at all), or None when ``body`` is not such an error."""
    value, is_json = parse_body(body)
    if not is_json:
        return None
    message, code = error_info(value)
    if message is None:
        return None
    common: dict[str, Any] = {"http_status": status, "provider_code": code, "provider_message": message}
    if is_context_overflow(message, code):
        return context_overflow(message, value, **common)
    return InBandError(message, retryable=is_retryable_code(code), **common)


def is_context_overflow(message: str | None, code: Any) -> bool:
    """Whether an error says the prompt does not fit the context window."""
    if isinstance(code, str) and code in _OVERFLOW_CODES:
        return True
    return bool(message and _OVERFLOW_TEXT.search(message))


def context_overflow(message: str, body: Any = None, **common: Any) -> ContextOverflowError:
    """The overflow error of ``message``, with the sizes it states (``_overflow_sizes``; issue 17).

    Args:
        message: the provider's message (or ours).
        body: the parsed JSON error body, whose error object may carry llama.cpp's ``n_ctx`` and
            ``n_prompt_tokens``; None when there is none.
        common: the other ``ProviderError`` keyword arguments (status, code, …).
    """
    return ContextOverflowError(message, **overflow_sizes(message, _error_object(body)), **common)


def _error_object(body: Any) -> Mapping[str, Any] | None:
    """The error object of a JSON error body (``{"error": {...}}`` or the body itself), or None."""
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    if not isinstance(body, Mapping):
        return None
    inner = body.get("error")
    return inner if isinstance(inner, Mapping) else body


def parse_body(body: bytes) -> tuple[Any, bool]:
    """``(value, ok)``: the JSON value of ``body``, or ``(text, False)`` when it is not JSON."""
    text = body.decode("utf-8", errors="replace")
    try:
        return json.loads(text), True
    except (ValueError, RecursionError):  # RecursionError: nested too deeply to be an error body
        return text.strip(), False


def error_from_http(status: int, headers: Mapping[str, str], body: bytes, *, vendor: str) -> ProviderError:
    """The typed error for a non-2xx response.

    Args:
        status: HTTP status (not 2xx).
        headers: response headers (case-insensitive mapping; ``retry-after``/``retry-after-ms``).
        body: the (bounded) response body.
        vendor: provider name for messages (``"openai"``, ``"anthropic"``).
    """
    value, is_json = parse_body(body)
    message, code = error_info(value) if is_json else (clean_message(value, status=status) or None, None)
    own = message if is_json else None  # a plain-text or HTML body is no message of the provider's
    message = message or f"{vendor} returned HTTP {status}"
    retry_after = parse_retry_after(headers)
    common: dict[str, Any] = {
        "http_status": status,
        "provider_code": code,
        "retry_after_s": retry_after,
        "provider_message": own,
    }
    if status in (401, 403):
        return AuthenticationError(message, **common)
    if status == 429:
        return RateLimitedError(message, **common)
    if status == 413 or (status in (400, 422) and is_context_overflow(message, code)):
        return context_overflow(message, value if is_json else None, **common)
    if status in (503, 529):
        return OverloadedError(message, **common)
    if status >= 500:
        return ServerError(message, **common)
    return BadResponseError(message, retryable=status in (408, 409), **common)


def error_from_non_sse(status: int, content_type: str, body: bytes) -> BadResponseError:
    """The error for a 2xx response that is not ``text/event-stream`` (SC-20).

    ``{"error": {...}}`` gives its message and code; ``null`` or anything else gives a generic
    message with ``provider_code`` None. Never an empty success.
    """
    value, is_json = parse_body(body)
    message, code = error_info(value) if is_json else (None, None)
    own = message
    if message is None:
        shown = "null" if is_json and value is None else (content_type or "no content-type")
        message = f"expected an event stream, got a non-SSE body ({shown})"
    return BadResponseError(message, http_status=status, provider_code=code, provider_message=own)


_RETRYABLE_CODES = frozenset(
    {
        "overloaded_error",
        "rate_limit_error",
        "rate_limit_exceeded",
        "api_error",
        "server_error",
        "timeout",
        "overloaded",
    }
)


def is_retryable_code(code: Any) -> bool:
    """Whether an in-band error code looks transient (HTTP-like 408/429/5xx, overload, rate)."""
    if isinstance(code, int) and not isinstance(code, bool):
        return code in (408, 429) or code >= 500
    if isinstance(code, str):
        return code.isdigit() and is_retryable_code(int(code)) or code in _RETRYABLE_CODES
    return False
