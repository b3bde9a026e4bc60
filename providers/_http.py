"""The HTTP half of the streaming providers: client, timeouts, retries, error mapping.

Vendor modules supply the wire format (URL, headers, request body, a stream parser); this
module owns everything about the connection, so both vendors behave the same way:

* the httpx2 client is built here, once per provider (connect/write/pool timeouts), its
  connections on plain asyncio streams (``providers._asyncio_net``);
* ``first_byte_timeout`` bounds the time from sending the request to the first body byte,
  ``idle_timeout`` every later gap between reads (asyncio-level, like httpx's read timeout;
  :mod:`providers._read_deadline`);
* status and ``content-type`` are checked before any SSE parsing (SC-20, SC-21), and a body is
  bounded in bytes (:data:`MAX_RESPONSE_BYTES`) before the SSE decoder buffers it;
* :meth:`HTTPStreamProvider._map_errors` is the one place httpx2 exceptions become
  :class:`~providers.errors.ProviderError`;
* retries are bounded, honour ``retry_after_s``, and happen only before the first output chunk
  (anything but usage) was yielded: once the caller has seen output, a retry would duplicate it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2

from providers._asyncio_net import use_asyncio_network
from providers._errorbody import error_from_http, error_from_non_sse, error_from_unframed
from providers._read_deadline import ReadDeadline
from providers._stream_base import StreamParser
from providers.base import LLMProvider
from providers.chunks import ProviderChunk, UsageChunk
from providers.errors import (
    BadResponseError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    StreamTruncatedError,
)
from providers.metering import notify_retry
from providers.redaction import redact
from providers.replay_identity import normalise_endpoint
from providers.sse import SSEEventReader
from providers.types import ProviderRequest
from providers.unicode_text import fix_surrogates

logger = logging.getLogger(__name__)

MAX_ERROR_BODY_BYTES = 64 * 1024

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""Bytes one streamed response may have (issue 16, "provider response size"). The turn's text is
capped in characters by the agent loop; this bounds what that cap does not see — an event or a
line that never ends, endless keep-alive comments or non-text deltas — before the SSE decoder
buffers it. Above the ~45 MB a 1 000 000-character answer takes one token a chunk. Past it the
stream ends with a non-retryable ``BadResponseError`` after the chunks that arrived."""


def json_body(body: dict[str, Any]) -> bytes:
    """``body`` as UTF-8 JSON bytes, as httpx's ``json=`` encodes it (compact, NaN refused).

    A lone surrogate anywhere in it (history stored before it was scrubbed, a plugin's text)
    becomes U+FFFD and a split pair is rejoined (``unicode_text.fix_surrogates``), instead of
    failing every request of the dialog with ``UnicodeEncodeError``. The check is the encoding
    itself: the repair pass runs only when that failed.

    Raises:
        ValueError: ``body`` holds NaN or infinity, or a value that is not JSON.
    """
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Surrogates can only be inside JSON strings here, so repairing the whole text is exact.
        return fix_surrogates(text).encode("utf-8")


DEFAULT_MAX_CONNECTIONS = 1000
"""Upstream connections per provider (process): above the streaming turns one process carries."""


class HTTPStreamProvider(LLMProvider):
    """Base of the HTTP/SSE providers (see the module docstring).

    Args:
        base_url: API root without a trailing slash.
        model: model id.
        connect_timeout: seconds to establish the connection (also write and pool waits).
        first_byte_timeout: seconds from sending the request to the first body byte.
        idle_timeout: seconds allowed between two body reads.
        max_retries: extra attempts for retryable errors before any chunk was yielded.
        retry_backoff: first backoff in seconds when the server gives no ``retry-after``;
            doubles per attempt.
        max_retry_delay: cap in seconds on any single wait between attempts.
        max_connections: concurrent upstream connections (one per streaming turn), all kept
            alive for reuse. A turn that finds them all busy waits for one — bounded by its own
            deadline, never failed because other turns hold the slots.
        transport: an httpx2 transport (tests: ``httpx2.MockTransport``), or None for the network.

    Attributes:
        max_response_bytes: bytes one streamed response may have (:data:`MAX_RESPONSE_BYTES`).
        retry_elsewhere: errors this provider does not retry because a fallback preset takes
            them (``providers.fallback.falls_back``, set on a preset before a fallback), or None.
    """

    retry_elsewhere: Callable[[ProviderError], bool] | None = None

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        connect_timeout: float = 10.0,
        first_byte_timeout: float = 60.0,
        idle_timeout: float = 60.0,
        max_retries: int = 2,
        retry_backoff: float = 0.5,
        max_retry_delay: float = 60.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.endpoint = normalise_endpoint(self.base_url)
        self._base_url_problem = _port_problem(self.base_url)
        self.model = model
        self.first_byte_timeout = first_byte_timeout
        self.idle_timeout = idle_timeout
        self.max_retries = max(0, max_retries)
        self.retry_backoff = retry_backoff
        self.max_retry_delay = max_retry_delay
        self.max_response_bytes = MAX_RESPONSE_BYTES
        # pool=None: waiting for a free connection is not a provider failure (the library default
        # of 100 connections with a 10 s pool wait failed turns at 500 concurrent streams).
        timeout = httpx2.Timeout(
            connect=connect_timeout, read=None, write=max(connect_timeout, idle_timeout), pool=None
        )
        limits = httpx2.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client = httpx2.AsyncClient(
            transport=transport, timeout=timeout, limits=limits, follow_redirects=False
        )
        use_asyncio_network(self._client)

    # --- vendor hooks -------------------------------------------------------------------------

    @abstractmethod
    def _url(self) -> str:
        """The streaming endpoint."""

    @abstractmethod
    def _headers(self) -> dict[str, str]:
        """Request headers (authentication, API version)."""

    @abstractmethod
    def build_body(self, request: ProviderRequest) -> dict[str, Any]:
        """The JSON request body for ``request`` (pure)."""

    @abstractmethod
    def _new_parser(self) -> StreamParser:
        """A fresh parser for one response."""

    def _error_from_response(self, status: int, headers: httpx2.Headers, body: bytes) -> ProviderError:
        return error_from_http(status, headers, body, vendor=self.name)

    # --- streaming ----------------------------------------------------------------------------

    async def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        """See :meth:`LLMProvider.stream`; retries per the module docstring (network I/O)."""
        body = self.build_body(request)
        attempt = 0
        while True:
            yielded = False
            try:
                # aclosing: when our caller stops early, the response is closed now, not at GC.
                async with contextlib.aclosing(self._stream_once(body)) as batches:
                    async for batch in batches:
                        for chunk in batch:
                            # Usage alone is not output: a retry supersedes it (the last one wins).
                            yielded = yielded or not isinstance(chunk, UsageChunk)
                            yield chunk
                return
            except ProviderError as exc:
                self._redact(exc)
                if yielded or not exc.retryable or attempt >= self.max_retries:
                    raise
                if self.retry_elsewhere is not None and self.retry_elsewhere(exc):
                    raise
                delay = self._retry_delay(exc, attempt)
                notify_retry(
                    self.name, exc.kind, delay_s=delay, attempt=attempt + 1, max_retries=self.max_retries
                )
                logger.warning(
                    "provider %s: %s (%s, HTTP %s); retry %d/%d in %.2fs",
                    self.name,
                    exc.kind,
                    type(exc).__name__,
                    exc.http_status,
                    attempt + 1,
                    self.max_retries,
                    delay,
                )
            attempt += 1
            await asyncio.sleep(delay)

    def _redact(self, exc: ProviderError) -> None:
        """Remove credentials from a user-facing error message (the configured key, key-like
        strings, URL userinfo) and from the vendor's own message: vendors echo keys back
        ("Invalid API key: sk-…")."""
        known = (getattr(self, "_api_key", ""),)
        message = redact(exc.message, known)
        if message != exc.message:
            exc.message = message
            exc.args = (message, *exc.args[1:])
        if exc.provider_message is not None:
            exc.provider_message = redact(exc.provider_message, known)

    @property
    def display_url(self) -> str:
        """``base_url`` without userinfo and query (for ``repr()`` and logs)."""
        parts = urlsplit(self.base_url)
        netloc = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))

    def _retry_delay(self, exc: ProviderError, attempt: int) -> float:
        if exc.retry_after_s is not None:
            return min(exc.retry_after_s, self.max_retry_delay)
        return min(self.retry_backoff * (2**attempt) * random.uniform(0.8, 1.2), self.max_retry_delay)

    async def _stream_once(self, body: dict[str, Any]) -> AsyncIterator[list[ProviderChunk]]:
        """One attempt; yields the chunks of each body read as one list (one async-generator
        hop per read instead of per chunk: bench/bench_stream_parse.py)."""
        loop = asyncio.get_running_loop()
        first_byte_deadline = loop.time() + self.first_byte_timeout
        try:
            async with asyncio.timeout_at(first_byte_deadline):
                with self._map_errors():
                    http_request = self._client.build_request(
                        "POST",
                        self._url(),
                        content=json_body(body),
                        headers={**self._headers(), "content-type": "application/json"},
                    )
                    response = await self._client.send(http_request, stream=True)
        except TimeoutError as exc:
            raise ProviderTimeoutError(
                f"{self.name}: no response within {self.first_byte_timeout:g}s", phase="first_byte"
            ) from exc
        try:
            status = response.status_code
            if not 200 <= status < 300:
                raise self._error_from_response(status, response.headers, await self._read_bounded(response))
            content_type = response.headers.get("content-type", "")
            if "text/event-stream" not in content_type.lower():
                raise error_from_non_sse(status, content_type, await self._read_bounded(response))
            parser = self._new_parser()
            failure: ProviderError | None = None
            try:
                async with contextlib.aclosing(
                    self._parse_body(response, parser, first_byte_deadline)
                ) as batches:
                    async for batch in batches:
                        yield batch
            except ProviderError as exc:
                failure = exc
            tail = parser.end(failure)
            if tail:
                yield tail
            if parser.error is not None:
                raise parser.error
        finally:
            await response.aclose()

    async def _parse_body(
        self, response: httpx2.Response, parser: StreamParser, first_byte_deadline: float
    ) -> AsyncIterator[list[ProviderChunk]]:
        """The chunks of each body read, as one (non-empty) list per read."""
        reader = SSEEventReader()
        byte_iter = response.aiter_bytes()
        timer = ReadDeadline()
        loop = asyncio.get_running_loop()
        deadline: float | None = first_byte_deadline
        head = bytearray()  # the body while no SSE event arrived (an unframed JSON error?)
        saw_event = False
        received = 0
        try:
            while not parser.finished:
                data = await self._next_read(
                    byte_iter,
                    timer,
                    deadline if deadline is not None else loop.time() + self.idle_timeout,
                    first_byte=deadline is not None,
                    status=response.status_code,
                )
                deadline = None
                if data is not None:
                    received += len(data)
                    if received > self.max_response_bytes:
                        raise BadResponseError(
                            f"{self.name}: the response passed {self.max_response_bytes} bytes",
                            http_status=response.status_code,
                            retryable=False,
                        )
                events = reader.close() if data is None else reader.feed(data)
                if not saw_event:
                    saw_event = bool(events)
                    if not saw_event and data is not None and len(head) < MAX_ERROR_BODY_BYTES:
                        head += data
                    if data is None and not saw_event and head:
                        # A JSON error body sent as text/event-stream without `data:` framing.
                        unframed = error_from_unframed(response.status_code, bytes(head))
                        if unframed is not None:
                            raise unframed
                batch: list[ProviderChunk] = []
                for event in events:
                    batch += parser.feed(event)
                    if parser.finished:
                        break
                if batch:
                    yield batch
                if data is None:
                    return
            await self._drain(byte_iter)
        finally:
            timer.close()
            await byte_iter.aclose()

    async def _drain(self, byte_iter: AsyncIterator[bytes]) -> None:
        """Read the little that follows a terminal event (``[DONE]``, the chunked-encoding end)
        so the connection goes back to the pool instead of being closed; bounded and best-effort."""
        size = 0
        with contextlib.suppress(TimeoutError, httpx2.HTTPError):
            async with asyncio.timeout(min(self.idle_timeout, 1.0)):
                async for data in byte_iter:
                    size += len(data)
                    if size > MAX_ERROR_BODY_BYTES:
                        return

    async def _next_read(
        self,
        byte_iter: AsyncIterator[bytes],
        timer: ReadDeadline,
        deadline: float,
        *,
        first_byte: bool,
        status: int,
    ) -> bytes | None:
        """The next body read by loop time ``deadline``, or None at EOF.

        Raises:
            ProviderTimeoutError: no data in time (``phase`` first_byte or idle).
            StreamTruncatedError: the connection failed mid-body.
        """
        timer.start(deadline)
        try:
            return await anext(byte_iter, None)
        except asyncio.CancelledError as exc:
            if not timer.expired():
                raise
            phase, limit = (
                ("first_byte", self.first_byte_timeout) if first_byte else ("idle", self.idle_timeout)
            )
            raise ProviderTimeoutError(
                f"{self.name}: no data for {limit:g}s ({phase.replace('_', ' ')})",
                phase=phase,
                http_status=status,
            ) from exc
        except (httpx2.TransportError, httpx2.DecodingError) as exc:
            raise StreamTruncatedError(
                f"{self.name}: connection lost mid-stream ({type(exc).__name__})", http_status=status
            ) from exc
        finally:
            timer.stop()

    async def _read_bounded(self, response: httpx2.Response) -> bytes:
        """Up to MAX_ERROR_BODY_BYTES of a (non-SSE) body, within the idle timeout."""
        parts: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.idle_timeout):
                with self._map_errors():
                    async for data in response.aiter_bytes():
                        parts.append(data)
                        size += len(data)
                        if size >= MAX_ERROR_BODY_BYTES:
                            break
        except TimeoutError:
            pass  # classify what arrived; the status already tells the story
        except ProviderError:
            pass
        return b"".join(parts)[:MAX_ERROR_BODY_BYTES]

    @contextlib.contextmanager
    def _map_errors(self) -> Iterator[None]:
        """Translate httpx2 exceptions before a response exists (the one mapping boundary)."""
        if self._base_url_problem is not None:  # the socket layer would raise OverflowError
            raise ProviderConnectionError(
                f"{self.name}: invalid base URL ({self._base_url_problem})", retryable=False
            )
        try:
            yield
        except (httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
            raise ProviderTimeoutError(f"{self.name}: could not connect in time", phase="connect") from exc
        except httpx2.WriteTimeout as exc:
            raise ProviderTimeoutError(f"{self.name}: sending the request timed out", phase="write") from exc
        except httpx2.ReadTimeout as exc:
            raise ProviderTimeoutError(f"{self.name}: no response in time", phase="first_byte") from exc
        except (httpx2.UnsupportedProtocol, httpx2.InvalidURL) as exc:
            raise ProviderConnectionError(f"{self.name}: invalid base URL ({exc})", retryable=False) from exc
        except httpx2.TransportError as exc:
            raise ProviderConnectionError(f"{self.name}: connection failed ({type(exc).__name__})") from exc
        except httpx2.HTTPError as exc:
            raise BadResponseError(f"{self.name}: bad response ({type(exc).__name__})") from exc

    async def aclose(self) -> None:
        """Close the HTTP client (idempotent)."""
        await self._client.aclose()


def _port_problem(url: str) -> str | None:
    """Why ``url``'s port cannot be connected to (``"Port out of range 0-65535"``), or None."""
    try:
        _ = urlsplit(url).port  # the property validates
    except ValueError as exc:
        return str(exc)
    return None
