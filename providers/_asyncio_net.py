"""httpcore2's network backend on plain asyncio streams, for the providers' streaming client.

httpcore2's default backend runs on anyio: every body read opens a cancel scope (``fail_after``,
even without a timeout), and anyio's socket stream pauses and resumes the transport's reading
around each ``receive``, two ``epoll_ctl`` calls per read. A streamed answer is one small read
per chunk, so under load (100 dialogs × 20 chunks/s) that was about a third of the cost of
reading a provider's stream. :class:`AsyncioNetworkBackend` implements the same interface
(``httpcore2.AsyncNetworkBackend``) on ``asyncio.open_connection``: a read returns what the
stream reader holds, or waits for the next ``data_received``; timeouts, when httpcore2 passes
one, are ``asyncio.timeout``. Errors map to httpcore2's exceptions as the anyio backend maps them
(``ConnectError``/``ConnectTimeout``/``ReadError``/``ReadTimeout``/``WriteError``/``WriteTimeout``),
so httpx2 raises the same exceptions to ``providers._http``.

:func:`use_asyncio_network` puts it under an ``httpx2.AsyncClient``'s connection pools.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore2
import httpx2
from httpcore2._utils import is_socket_readable

__all__ = ["AsyncioNetworkBackend", "AsyncioNetworkStream", "use_asyncio_network"]


@contextlib.contextmanager
def _mapped(timeout_error: type[Exception], error: type[Exception]) -> Iterator[None]:
    try:
        yield
    except TimeoutError as exc:
        if (
            exc.errno is not None
        ):  # the kernel's ETIMEDOUT (a dead peer): a broken connection, not our deadline
            raise error(str(exc)) from exc
        raise timeout_error(str(exc) or "timed out") from exc
    except (OSError, EOFError, ssl.SSLError) as exc:
        raise error(str(exc) or type(exc).__name__) from exc


class AsyncioNetworkStream(httpcore2.AsyncNetworkStream):
    """One connection: an ``asyncio.StreamReader``/``StreamWriter`` pair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Up to ``max_bytes`` (``b""`` at the end of the stream). Raises ReadTimeout, ReadError."""
        with _mapped(httpcore2.ReadTimeout, httpcore2.ReadError):
            if timeout is None:
                return await self._reader.read(max_bytes)
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Write ``buffer`` and wait while the transport's buffer is over its high-water mark.
        Raises WriteTimeout, WriteError."""
        if not buffer:
            return
        with _mapped(httpcore2.WriteTimeout, httpcore2.WriteError):
            self._writer.write(buffer)
            async with asyncio.timeout(timeout):
                await self._writer.drain()

    async def aclose(self) -> None:
        self._writer.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.AsyncNetworkStream:
        """Upgrade this connection to TLS in place (the stream itself is returned). Raises
        ConnectTimeout, ConnectError; the connection is closed on failure."""
        try:
            with _mapped(httpcore2.ConnectTimeout, httpcore2.ConnectError):
                async with asyncio.timeout(timeout):
                    await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except Exception:
            await self.aclose()
            raise
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._writer.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        if info == "socket":
            return self._writer.get_extra_info("socket")
        if info == "is_readable":
            # An idle keep-alive connection that has bytes or an EOF waiting was closed or broken
            # by the server: the reader may already hold them, or the socket does.
            if self._reader.at_eof() or getattr(self._reader, "_buffer", b""):
                return True
            return is_socket_readable(self._writer.get_extra_info("socket"))
        return None


class AsyncioNetworkBackend(httpcore2.AsyncNetworkBackend):
    """Opens :class:`AsyncioNetworkStream` connections (TCP or Unix socket)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        """Raises ConnectTimeout, ConnectError."""
        with _mapped(httpcore2.ConnectTimeout, httpcore2.ConnectError):
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=(local_address, 0) if local_address else None
                )
        return _with_options(reader, writer, socket_options)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        """Raises ConnectTimeout, ConnectError."""
        with _mapped(httpcore2.ConnectTimeout, httpcore2.ConnectError):
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(path)
        return _with_options(reader, writer, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _with_options(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, socket_options: Iterable[Any] | None
) -> AsyncioNetworkStream:
    sock = writer.get_extra_info("socket")
    try:
        for option in socket_options or ():
            sock.setsockopt(*option)
    except OSError as exc:
        writer.close()
        raise httpcore2.ConnectError(str(exc)) from exc
    return AsyncioNetworkStream(reader, writer)


def use_asyncio_network(client: httpx2.AsyncClient) -> int:
    """Make every connection pool of ``client`` (its transport and its proxy mounts) open
    :class:`AsyncioNetworkStream` connections. Returns how many pools were switched; a transport
    without a connection pool (a test's ``MockTransport``) is left as it is."""
    switched = 0
    transports = [client._transport, *client._mounts.values()]  # noqa: SLF001 - httpx2 keeps no public list
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if isinstance(pool, httpcore2.AsyncConnectionPool):
            pool._network_backend = AsyncioNetworkBackend()  # noqa: SLF001 - httpcore2's documented backend hook, set after httpx2 built the pool
            switched += 1
    return switched
