"""The stream parser contract and what both vendors' parsers share (pure).

:class:`StreamParser` is what :mod:`providers._http` drives: SSE events in, chunks out, never an
exception mid-stream. :class:`StreamParserBase` gives both vendors the no-exception ``feed``
guard and records a stream error in ``parser.error``; the provider raises it after yielding the
partial chunks.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from httpx_sse import ServerSentEvent

from providers._errorbody import clean_message, context_overflow, is_context_overflow, is_retryable_code
from providers.chunks import ProviderChunk
from providers.errors import BadResponseError, InBandError, ProviderError
from providers.sse import event_json

logger = logging.getLogger(__name__)


class StreamParser(Protocol):
    """A vendor's pure event → chunk mapper for one response.

    Attributes:
        error: set when the stream failed (in-band error, truncation); raised by the caller
            after the chunks returned by :meth:`end` were yielded.
        finished: a terminal event arrived; the caller stops reading.
    """

    error: ProviderError | None
    finished: bool

    def feed(self, event: ServerSentEvent) -> list[ProviderChunk]:
        """Chunks for one SSE event."""

    def end(self, failure: ProviderError | None = None) -> list[ProviderChunk]:
        """Trailing chunks at the end of the body (``Done`` only on success); sets ``error``."""


class StreamParserBase:
    """Base of ``OpenAIStreamParser`` and ``AnthropicStreamParser``.

    Subclasses implement ``_feed(event)`` and set ``provider_name``, ``error``, ``finished`` and
    ``finish_reason`` in their ``__init__``.
    """

    provider_name: str
    error: ProviderError | None
    finished: bool
    finish_reason: str | None

    def feed(self, event: ServerSentEvent) -> list[ProviderChunk]:
        """Chunks for one event. A malformed event ends the stream with
        :class:`BadResponseError`; no other exception leaves this method."""
        try:
            return self._feed(event)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            self._malformed(f"unexpected event shape ({type(exc).__name__})")
            return []

    def _feed(self, event: ServerSentEvent) -> list[ProviderChunk]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _event_object(self, event: ServerSentEvent, data: str) -> dict[str, Any] | None:
        """The JSON object ``data`` (an event's stripped data) holds, else None: a non-JSON
        ``error`` event fails the stream with its text, other non-JSON events are skipped (logged)
        and JSON that is not an object is ignored."""
        try:
            obj = event_json(data)
        except ValueError:
            if event.event == "error":
                self._fail(clean_message(data), None)
            else:
                logger.warning(
                    "%s stream: skipped a non-JSON event (%d chars)", self.provider_name, len(data)
                )
            return None
        return obj if isinstance(obj, dict) else None

    def _malformed(self, what: str) -> None:
        if self.error is None:
            logger.warning("%s stream: malformed event (%s)", self.provider_name, what)
            self.error = BadResponseError(
                f"malformed stream event: {what}", http_status=200, finish_reason=self.finish_reason
            )
        self.finished = True

    def _fail(self, message: str | None, code: Any) -> None:
        """An in-band error (HTTP 200): a context overflow, or a typed ``InBandError``; the event's
        own ``message`` is its ``provider_message``."""
        kwargs: dict[str, Any] = {
            "http_status": 200,
            "provider_code": code,
            "finish_reason": self.finish_reason,
            "provider_message": message or None,
        }
        message = message or "provider reported an error in the stream"
        if is_context_overflow(message, code):
            self.error = context_overflow(message, **kwargs)
        else:
            self.error = InBandError(message, retryable=is_retryable_code(code), **kwargs)
        self.finished = True
