"""Typed provider failures.

::

    ProviderError                    message, kind, http_status, provider_code, retry_after_s, retryable
    ├── AuthenticationError          kind "authentication"    401/403: bad or missing key
    ├── RateLimitedError             kind "rate_limited"      429 (retry_after_s from the headers)
    ├── ServerError                  kind "server_error"      5xx: 500, 502, 504, … (the server failed)
    │   └── OverloadedError          kind "overloaded"        503, 529 (the server is busy: try later)
    ├── ContextOverflowError         kind "context_overflow"  the prompt does not fit the model
    │                                                         (with the sizes the error stated)
    ├── ProviderTimeoutError         kind "timeout"           connect / first byte / idle between chunks
    ├── ProviderConnectionError      kind "connection"        connection refused/reset before a response
    ├── BadResponseError             kind "http_error"        other non-2xx; 200 with a JSON error
    │                                                         body, ``null`` or any non-SSE body;
    │                                                         a stream over ``MAX_RESPONSE_BYTES``
    ├── InBandError                  kind "provider_error"    an error object inside a 200 stream
    ├── StreamTruncatedError         kind "truncated"         EOF without finish/[DONE]/message_stop,
    │                                                         or the connection dropped mid-body
    ├── RequestBlockedError          kind "blocked"           a pre-request hook refused the call
    │                                                         (nothing was sent; never retried)
    └── ResponseTooLongError         kind "response_too_long" the turn's streamed text + reasoning
                                                              passed its cap (raised by the agent
                                                              loop, not a vendor; never retried)

Vendor modules translate httpx2 and HTTP-level failures into these at one boundary
(``raise … from exc``). A stream raises one of them *after* yielding the chunks that arrived, so
callers keep the partial text; ``finish_reason`` carries a finish reason seen before the failure
(e.g. OpenRouter's ``"error"``). ``provider_code`` is the vendor's raw error code or type (any
JSON value). ``provider_message`` is the vendor's own words when a structured error carried them
(the ``message`` of a JSON error body or of an in-band error event), else None: what a user may
be shown of the provider's answer (after ``conversations.agent.failures`` bounds and redacts it).
Messages are short and never contain request payloads or keys.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from typing import Any


class ProviderError(Exception):
    """Base of every provider failure.

    Attributes:
        message: human-readable cause (no secrets, no payloads).
        kind: machine-readable category (see the module docstring).
        http_status: HTTP status of the response, or None when there was none (connect failure).
        provider_code: the vendor's error code or type, any JSON value, or None.
        retry_after_s: seconds the server asked us to wait, or None.
        retryable: whether trying the same request again may succeed.
        finish_reason: a finish reason that arrived before the failure, or None.
        provider_message: the vendor's human message from a JSON error body or an in-band error
            event (redacted like ``message``), or None for anything else — our own wording, a
            plain-text or HTML body, a transport failure.
    """

    kind = "provider_error"
    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        http_status: int | None = None,
        provider_code: Any = None,
        retry_after_s: float | None = None,
        retryable: bool | None = None,
        finish_reason: str | None = None,
        provider_message: str | None = None,
    ) -> None:
        super().__init__(message)
        self.provider_message = provider_message
        self.message = message
        self.http_status = http_status
        self.provider_code = provider_code
        self.retry_after_s = retry_after_s
        self.retryable = self.default_retryable if retryable is None else retryable
        self.finish_reason = finish_reason

    def to_dict(self) -> dict[str, Any]:
        """``{kind, http_status, provider_code, message, retry_after_s}`` (the cases' shape)."""
        return {
            "kind": self.kind,
            "http_status": self.http_status,
            "provider_code": self.provider_code,
            "message": self.message,
            "retry_after_s": self.retry_after_s,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, http_status={self.http_status!r}, code={self.provider_code!r})"


class AuthenticationError(ProviderError):
    """The API key is missing, wrong or not allowed to use the model (401/403)."""

    kind = "authentication"


class RateLimitedError(ProviderError):
    """429: slow down; ``retry_after_s`` says for how long when the server said so."""

    kind = "rate_limited"
    default_retryable = True


class ServerError(ProviderError):
    """The provider's server failed (5xx other than 503/529: 500, 502, 504, …)."""

    kind = "server_error"
    default_retryable = True


class OverloadedError(ServerError):
    """The provider is overloaded or unavailable (503, Anthropic's 529): a server error that says
    "try again later" rather than "something broke"."""

    kind = "overloaded"


class ContextOverflowError(ProviderError):
    """The request does not fit the model's context window: compact and retry once.

    The sizes are what the provider's error stated (``_overflow_sizes``; issue 17), each a count
    of the provider's tokens, or None when it did not say.

    Attributes:
        limit_tokens: the model's context window.
        requested_tokens: the whole request: input + requested output.
        prompt_tokens: the input (messages, tool definitions).
        output_tokens: the requested output budget (``max_tokens``).
    """

    kind = "context_overflow"

    def __init__(
        self,
        message: str,
        *,
        limit_tokens: int | None = None,
        requested_tokens: int | None = None,
        prompt_tokens: int | None = None,
        output_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.limit_tokens = limit_tokens
        self.requested_tokens = requested_tokens
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens


class ProviderTimeoutError(ProviderError):
    """No connection, no first byte, or too long a gap between chunks.

    Attributes:
        phase: ``"connect"``, ``"first_byte"``, ``"idle"`` or ``"write"``.
    """

    kind = "timeout"
    default_retryable = True

    def __init__(self, message: str, *, phase: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.phase = phase


class ProviderConnectionError(ProviderError):
    """No HTTP response: connection refused or reset, DNS failure, TLS error, bad URL."""

    kind = "connection"
    default_retryable = True


class BadResponseError(ProviderError):
    """A response we cannot use: other non-2xx, or a 200 whose body is not an event stream."""

    kind = "http_error"


class InBandError(ProviderError):
    """An error object inside a 200 event stream (after the headers said success)."""

    kind = "provider_error"


class StreamTruncatedError(ProviderError):
    """The stream ended (or the connection dropped) before its terminal event."""

    kind = "truncated"
    default_retryable = True


class RequestBlockedError(ProviderError):
    """A pre-request hook refused the call (:mod:`providers.hooks`); no request was sent.

    Attributes:
        hook: the name of the hook that blocked (its qualified name unless registered with one).
    """

    kind = "blocked"

    def __init__(self, message: str, *, hook: str, **kwargs: Any) -> None:
        super().__init__(message, retryable=False, **kwargs)
        self.hook = hook


class ResponseTooLongError(ProviderError):
    """The turn's streamed answer text and reasoning together passed their cap.

    Raised by the consumer of a stream (the agent loop, ``PICOBOT_MAX_TURN_OUTPUT_CHARS``), not
    by a vendor module: a server that ignores ``max_tokens`` could otherwise stream an answer no
    WebSocket frame can carry. The part that fitted was shown and is kept as a partial; the
    stream is closed. Never retryable (the same request would run past the cap again).

    Attributes:
        max_chars: the cap, in characters (code points) of text + reasoning per turn.
    """

    kind = "response_too_long"

    def __init__(self, message: str, *, max_chars: int, **kwargs: Any) -> None:
        super().__init__(message, retryable=False, **kwargs)
        self.max_chars = max_chars


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait according to ``retry-after-ms`` or ``Retry-After``.

    ``retry-after-ms`` (OpenAI) wins; ``Retry-After`` is delta-seconds or an HTTP-date. A date in
    the past gives 0.0. ``headers`` lookups must be case-insensitive (httpx2 headers are).

    Returns:
        Seconds (float, 0 … ``MAX_RETRY_AFTER_S``: an infinite value is clamped), or None
        when neither header is present or parseable (NaN is not).
    """
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            seconds = _finite(float(raw_ms) / 1000.0)
        except ValueError:
            seconds = None
        if seconds is not None:
            return seconds
    raw = headers.get("retry-after")
    if not raw:
        return None
    raw = raw.strip()
    try:
        return _finite(float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return _finite(when.timestamp() - current)


MAX_RETRY_AFTER_S = 86400.0  # a longer (or infinite) Retry-After is reported as one day


def _finite(seconds: float) -> float | None:
    """``seconds`` clamped to ``[0, MAX_RETRY_AFTER_S]``; None for NaN (unparseable)."""
    if math.isnan(seconds):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER_S)
