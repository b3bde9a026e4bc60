"""The fetch guard: URLs ``http_fetch`` may request, and connections only to checked addresses.

Every address a host name resolves to is checked at connect time (:func:`address_refusal`) and
the connection goes to that checked address, so a DNS answer cannot change between the check
and the connect (no DNS rebinding); the request keeps the name for ``Host`` and TLS SNI.
Environment proxies and ``.netrc`` are ignored: a proxy would bypass the check. Refusals raise
:class:`FetchRefused` (rules in ``tools/README.md``; DESIGN §9).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

from conversations.tools.http_fetch.addresses import IPAddress, address_refusal
from conversations.tools.http_fetch.policy import FetchPolicy, FetchRefused


def check_url(url: httpx2.URL) -> None:
    """Refuse a URL ``http_fetch`` must not request (scheme, credentials, missing host).

    Addresses are checked later, at connect time (:class:`GuardedBackend`).

    Raises:
        FetchRefused: with the reason.
    """
    if url.scheme not in ("http", "https"):
        raise FetchRefused(f"refused: only http and https URLs are allowed, not {url.scheme or 'no'} scheme")
    if url.userinfo:
        raise FetchRefused("refused: URLs with credentials (user:password@) are not allowed")
    if not url.host:
        raise FetchRefused("refused: the URL has no host")


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (IPv4 and IPv6), in the resolver's order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[str] = []
    for *_, sockaddr in infos:
        if sockaddr[0] not in out:
            out.append(sockaddr[0])
    return out


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2 network backend that resolves names itself and connects only to checked addresses.

    ``connect_tcp(host, …)`` resolves ``host``, refuses the connection when *any* address is
    refused (a name that also points inside is not trusted), then connects to the first address
    that answers — by IP, so the address connected to is the one checked. httpcore keeps using
    the name for TLS SNI, and the request's ``Host`` header comes from the URL.
    """

    def __init__(self, policy: FetchPolicy, inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        self.policy = policy
        self._inner = inner or httpcore2.AnyIOBackend()

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        """The checked addresses of ``host``.

        Raises:
            FetchRefused: the name does not resolve, or an address is refused.
        """
        try:
            literal = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            addresses: Iterable[str] = [str(literal)]
        else:
            resolver = self.policy.resolver or system_resolver
            try:
                addresses = await resolver(host, port)
            except OSError as exc:
                raise FetchRefused(f"cannot resolve host {host!r}") from exc
        checked: list[IPAddress] = []
        for text in addresses:
            ip = ipaddress.ip_address(text.split("%", 1)[0])
            exempt = self.policy.allow_address is not None and self.policy.allow_address(ip)
            reason = None if exempt else address_refusal(ip, allow_private=self.policy.allow_private)
            if reason:
                shown = "" if literal is not None else f" ({host} resolves to {ip})"
                raise FetchRefused(f"refused: {ip if literal is not None else host} is {reason}{shown}")
            checked.append(ip)
        if not checked:
            raise FetchRefused(f"cannot resolve host {host!r}")
        return checked

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        """Connect to a checked address of ``host`` (see the class docstring)."""
        error: Exception | None = None
        for ip in await self.resolve(host, port):
            try:
                return await self._inner.connect_tcp(
                    str(ip), port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> Any:
        """Never: only TCP to checked addresses."""
        raise FetchRefused("refused: unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        """Delegates to the inner backend."""
        await self._inner.sleep(seconds)


class GuardedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport on a connection pool whose connections go through ``GuardedBackend``.

    ``AsyncHTTPTransport`` takes no network backend, so its pool is replaced by an equivalent one
    (same TLS context) that has ours; the request/response mapping stays httpx2's own.
    """

    def __init__(self, backend: GuardedBackend) -> None:
        super().__init__(trust_env=False)
        ssl_context = self._pool._ssl_context  # type: ignore[union-attr]
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=ssl_context, max_connections=4, keepalive_expiry=5.0, network_backend=backend
        )
