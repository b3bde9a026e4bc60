"""A real HTTP/1.1 server on 127.0.0.1 that replays scripted responses (test helper).

Exported as :class:`providers.testing.LocalSSEServer`. Written on ``asyncio.start_server`` so
the whole client stack (httpx2, its connection pool, chunked decoding, keep-alive) runs for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any


@dataclass
class SSEResponse:
    """One scripted response.

    Attributes:
        status: HTTP status.
        headers: response headers (default ``content-type: text/event-stream``).
        pieces: body pieces; with ``chunked`` each is one chunk of the chunked encoding and is
            flushed on its own (pieces may split UTF-8 sequences anywhere).
        delay: seconds to wait before each piece.
        headers_delay: seconds to wait before sending the status line and headers.
        chunked: use ``Transfer-Encoding: chunked`` (else ``Content-Length``).
        abort: close the connection after the pieces without ending the body (a dropped
            upstream).
        stall_after: send only this many pieces, then go silent with the body unfinished and
            the connection open until the client closes it (a hung upstream), or None.
    """

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    pieces: Sequence[bytes] = ()
    delay: float = 0.0
    chunked: bool = True
    abort: bool = False
    headers_delay: float = 0.0
    stall_after: int | None = None

    @classmethod
    def coerce(cls, value: SSEResponse | tuple[Any, ...]) -> SSEResponse:
        """Accept an :class:`SSEResponse` or a ``(status, headers, pieces, delay)`` tuple."""
        if isinstance(value, SSEResponse):
            return value
        status, headers, pieces, *rest = value
        return cls(status, dict(headers), list(pieces), float(rest[0]) if rest else 0.0)


@dataclass
class RecordedRequest:
    """A request the server received (headers lower-cased; ``connection`` numbers the TCP
    connection it came on, from 1, so keep-alive reuse is visible)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int = 0

    def json(self) -> Any:
        """The body parsed as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


# What a request handler returns: a response, a ``(status, headers, pieces[, delay])`` tuple, or None.
Handled = SSEResponse | tuple[Any, ...] | None


class LocalSSEServer:
    """Serve scripted responses, in order, to sequential or concurrent requests.

    ``async with LocalSSEServer([SSEResponse(pieces=[...]), (429, {...}, [b"..."], 0)]) as s:``
    then point a provider at ``s.base_url`` (``http://127.0.0.1:<port>/v1``). Every request,
    on any path, takes the next response; connections are kept alive unless the client asks
    to close or the response aborts.

    Args:
        responses: the script.
        repeat_last: when the script is exhausted, serve the last response again; otherwise
            answer ``500`` with a JSON error naming the request number (and record it in
            :attr:`errors`), so a test that sends too many requests fails clearly.
        handler: instead of the script, a callable ``handler(request)`` that returns (or is a
            coroutine returning) the response to one :class:`RecordedRequest` — an
            :class:`SSEResponse` or a ``(status, headers, pieces[, delay])`` tuple — e.g. an
            upstream that validates requests, or one that holds a response until the test lets
            it go. Returning None answers like an exhausted script; an exception answers ``500``
            (both recorded in :attr:`errors`). The request is already in :attr:`recorded`.

    Attributes:
        requests: the JSON bodies received (None for non-JSON bodies), in order.
        recorded: the full :class:`RecordedRequest` of each.
        errors: what went wrong on the server side (exhausted script, bad requests).
    """

    def __init__(
        self,
        responses: Sequence[SSEResponse | tuple[Any, ...]] = (),
        *,
        repeat_last: bool = False,
        handler: Callable[[RecordedRequest], Handled | Awaitable[Handled]] | None = None,
    ) -> None:
        self._responses = [SSEResponse.coerce(r) for r in responses]
        self.handler = handler
        self._next = 0
        self.repeat_last = repeat_last
        self.requests: list[Any] = []
        self.recorded: list[RecordedRequest] = []
        self.errors: list[str] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections = 0
        self.port = 0

    def add(self, response: SSEResponse | tuple[Any, ...]) -> None:
        """Append a response to the script."""
        self._responses.append(SSEResponse.coerce(response))

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1`` (an OpenAI-style base URL)."""
        return f"{self.url}/v1"

    async def __aenter__(self) -> LocalSSEServer:
        self._server = await asyncio.start_server(self._on_connect, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2.0)

    def _take(self) -> SSEResponse | None:
        if self._next < len(self._responses):
            self._next += 1
            return self._responses[self._next - 1]
        if self.repeat_last and self._responses:
            return self._responses[-1]
        return None

    def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Our own task (not asyncio's callback task), so cancelling it at exit is not reported
        # as an unhandled error by StreamReaderProtocol.
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        connection = self._connections
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    return
                request.connection = connection
                self.recorded.append(request)
                self.requests.append(request.json())
                response, message = await self._respond(request)
                if response is None:
                    self.errors.append(message)
                    body = json.dumps(
                        {"error": {"message": message, "code": "local_sse_server_exhausted"}}
                    ).encode()
                    response = SSEResponse(500, {"content-type": "application/json"}, [body], chunked=False)
                    await self._send(writer, response, keep_alive=False)
                    return
                keep_alive = (
                    request.headers.get("connection", "").lower() != "close"
                    and not response.abort
                    and response.stall_after is None
                )
                await self._send(writer, response, keep_alive)
                if response.stall_after is not None:
                    await reader.read()  # silent until the client gives up and closes
                    return
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _respond(self, request: RecordedRequest) -> tuple[SSEResponse | None, str]:
        """The response to ``request`` (script or handler), or None and why there is none."""
        number = len(self.recorded)
        if self.handler is None:
            response = self._take()
        else:
            try:
                result: Any = self.handler(request)
                if inspect.isawaitable(result):
                    result = await result
                response = None if result is None else SSEResponse.coerce(result)
            except Exception as exc:  # a broken test handler must fail the request, not hang it
                return None, f"LocalSSEServer: handler failed on request #{number}: {exc!r}"
        return response, f"LocalSSEServer: no scripted response left for request #{number}"

    async def _read_request(self, reader: asyncio.StreamReader) -> RecordedRequest | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    await reader.readline()
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(parts)
        else:
            body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
        return RecordedRequest(method, path, headers, body)

    async def _send(self, writer: asyncio.StreamWriter, response: SSEResponse, keep_alive: bool) -> None:
        pieces = [p for p in response.pieces if p]  # an empty chunk would end a chunked body
        headers = {k.lower(): v for k, v in response.headers.items()}
        if response.chunked:
            headers.pop("content-length", None)
            headers["transfer-encoding"] = "chunked"
        else:
            headers["content-length"] = str(sum(len(p) for p in pieces))
        headers["connection"] = "keep-alive" if keep_alive else "close"
        try:
            reason = HTTPStatus(response.status).phrase
        except ValueError:
            reason = "Unknown"
        head = f"HTTP/1.1 {response.status} {reason}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()
        )
        if response.headers_delay:
            await asyncio.sleep(response.headers_delay)
        writer.write(head.encode("latin-1") + b"\r\n")
        await writer.drain()
        if response.stall_after is not None:
            pieces = pieces[: response.stall_after]
        for piece in pieces:
            if response.delay:
                await asyncio.sleep(response.delay)
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if response.chunked else piece)
            await writer.drain()
        if response.abort:
            writer.transport.abort()
            return
        if response.stall_after is not None:
            return
        if response.chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
