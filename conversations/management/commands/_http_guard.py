"""A request body limit for ``manage.py serve``'s Daphne, enforced while the body arrives.

Daphne reads a whole HTTP request body (spooled by Twisted) and then hands it to the
application in memory, so an application-level limit (the REST API's 413 for bodies over 1 MiB)
only answers after the server has buffered whatever the client sent: an unauthenticated 800 MB
POST cost the process over 1 GB. :func:`install_body_limit` makes the server's HTTP requests
refuse a body over the limit *before* it is read: by its ``Content-Length`` as soon as the headers
arrive (no ``100 Continue`` is sent), or — chunked or lying — as soon as more bytes than the limit
have arrived. The answer is a JSON ``413 body_too_large`` (``{code, message, ref}``, as every API
error; under ``/v1/`` OpenAI's ``{"error": {…, "code": "request_too_large"}}``) and the
connection is closed (after a short lingering read that drops what is still in
flight); the application never sees the request and nothing of the body is kept.

Only ``serve`` installs it. ``daphne picobot_site.asgi:application`` (the scale-out mode) has no
such hook: put a reverse proxy with a body limit in front of it (README, "Production").

Import this module only after ``daphne.server`` (which installs Twisted's asyncio reactor).
"""

from __future__ import annotations

import json
import logging
import secrets
import types
from typing import Any

from daphne.http_protocol import HTTPFactory, WebRequest

from conversations.api.openai_compat.wire import INVALID_REQUEST, error_body
from picobot_site.headers import RAW_ANSWER_HEADERS

log = logging.getLogger(__name__)

_SECURITY_HEADERS = "".join(f"{name}: {value}\r\n" for name, value in RAW_ANSWER_HEADERS).encode()
"""Every answer carries the security headers (README "Security"), this one written by hand too."""

MAX_HTTP_BODY_BYTES = 3 * 1024 * 1024
"""No request PicoBot serves needs more: REST bodies are refused over 1 MiB (PROTOCOL §2) and the
admin's forms stay under Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (2.5 MB)."""


LINGER_SECONDS = 2.0
"""How long a refused request's connection still reads (and drops) what the client sends."""


def _abort(transport: Any) -> None:
    if getattr(transport, "connected", False):
        transport.abortConnection()


class BodyLimitedRequest(WebRequest):
    """Daphne's request, refusing a body over ``max_body_bytes`` before it is buffered."""

    max_body_bytes = MAX_HTTP_BODY_BYTES

    def gotLength(self, length: int | None) -> None:  # noqa: N802 - Twisted's name
        self._body_received = 0
        self._body_refused = False
        # The request line's path (Twisted keeps it on the channel until the body is complete).
        self._target = getattr(self.channel, "_path", b"") or b""
        if length is not None and length > self.max_body_bytes:
            # Answered before any body byte is read; no "100 Continue" invites the client to send it.
            self.requestHeaders.removeHeader(b"expect")
            super().gotLength(0)
            self._refuse_body(f"Content-Length {length}")
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:  # noqa: N802 - Twisted's name
        if self._body_refused:
            return  # bytes still in flight after the refusal: dropped
        self._body_received += len(data)
        if self._body_received > self.max_body_bytes:
            self._refuse_body(f"more than {self.max_body_bytes} bytes received")
            return
        super().handleContentChunk(data)

    def process(self) -> Any:
        if getattr(self, "_body_refused", False):
            return None  # the last chunk arrived in the same read as the refused ones: never run
        return super().process()

    def _refuse_body(self, why: str) -> None:
        self._body_refused = True
        ref = secrets.token_hex(4)
        log.info("HTTP request body refused with 413 (ref %s): %s", ref, why)
        limit = self.max_body_bytes
        shown = f"{limit // 1048576} MiB" if limit % 1048576 == 0 else f"{limit} bytes"
        message = f"the request body exceeds {shown}"
        if self._target.startswith(b"/v1/"):  # the OpenAI-compatible endpoint answers in OpenAI's shape
            payload = error_body(message, type=INVALID_REQUEST, code="request_too_large")
        else:
            payload = {"code": "body_too_large", "message": message, "ref": ref}
        body = json.dumps(payload).encode()
        head = (
            b"HTTP/1.1 413 Content Too Large\r\n"
            b"Content-Type: application/json; charset=utf-8\r\n"
            b"Content-Length: %d\r\n"
            b"%s"
            b"Connection: close\r\n\r\n" % (len(body), _SECURITY_HEADERS)
        )
        transport = self.channel.transport if self.channel is not None else None
        if transport is None:
            return
        transport.write(head + body)
        # A lingering close (as nginx does): send the answer and FIN, then read and drop what is
        # still in flight for a moment, so that the client's TCP stack gets no reset that would
        # destroy the 413 before it is read; then cut the connection. Nothing is buffered.
        if hasattr(transport, "loseWriteConnection"):
            transport.loseWriteConnection()
            from twisted.internet import reactor

            reactor.callLater(LINGER_SECONDS, _abort, transport)
        else:
            transport.loseConnection()


def install_body_limit(factory: HTTPFactory, max_body_bytes: int = MAX_HTTP_BODY_BYTES) -> None:
    """Make the server's HTTP factory build connections whose requests refuse large bodies.

    Call it on ``server.http_factory`` from Daphne's ready callback: the listeners exist then,
    and no connection was accepted yet (the reactor runs after the callback).
    """
    request_class = type("BodyLimitedRequest", (BodyLimitedRequest,), {"max_body_bytes": max_body_bytes})

    def build_protocol(self: HTTPFactory, addr: Any) -> Any:
        protocol = HTTPFactory.buildProtocol(self, addr)
        protocol.requestFactory = request_class
        return protocol

    factory.buildProtocol = types.MethodType(build_protocol, factory)
