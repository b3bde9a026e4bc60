"""The ``http_fetch`` tool: GET a web page as text, without reaching the server's own network.

Rules (issue 6 "Tools", DESIGN §6 and §9):

- GET only; ``http``/``https`` only (``file:``, ``ftp:``, ``gopher:``, ``data:``… are refused);
  URLs with credentials (``user:pass@``) are refused.
- The size limit (``PICOBOT_HTTP_FETCH_MAX_BYTES``, 1 MiB; the call's ``max_bytes`` may only
  lower it) bounds the body read from the wire *and* after gzip/deflate decoding; the time limit
  (``PICOBOT_HTTP_FETCH_TIMEOUT``, 15 s) bounds the whole fetch, redirects included.
- At most 5 redirects; every hop's URL is checked again.
- Server-side request forgery: every address a host name resolves to is checked *at connect
  time*, and the connection goes to the checked address (so a DNS answer cannot change between
  the check and the connect: no DNS rebinding); the request keeps the name for ``Host`` and TLS
  SNI. Refused: loopback, private (RFC 1918, CGNAT 100.64/10, fc00::/7), link-local
  (169.254/16, fe80::/10), multicast, unspecified, reserved and other non-global ranges, and
  IPv6 forms that embed such an IPv4 address (IPv4-mapped, 6to4, Teredo, NAT64 64:ff9b::/96).
  ``PICOBOT_HTTP_FETCH_ALLOW_PRIVATE=1`` lifts the loopback/private/link-local refusals for
  intranet use, but never for the cloud metadata addresses (169.254.169.254, fd00:ec2::254),
  unspecified or multicast addresses.
- Environment proxies and ``.netrc`` are ignored (a proxy would bypass the address check).
- Only text is returned (``text/*``, JSON, XML, JavaScript; an untyped body that decodes as
  UTF-8), decoded by its charset; HTML is reduced to readable text with ``html.parser``. The
  result names the final URL, status and content type, never other response headers (cookies).
"""

from __future__ import annotations

import asyncio
import codecs
import ipaddress
import re
import socket
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

import httpcore2
import httpx2

from conversations.tools.registry import Tool, ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``resolver(host, port) -> addresses`` (IP strings); the default asks the system (getaddrinfo)."""

DEFAULT_MAX_BYTES = 1024 * 1024
DEFAULT_TIMEOUT = 15.0
MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "PicoBot-http_fetch/1 (+self-hosted LLM chat gateway)"
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
_SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # well-known NAT64 prefix: the last 32 bits are IPv4
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")  # local-use NAT64 (RFC 8215)
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-javascript",
        "application/xhtml+xml",
        "application/rss+xml",
        "application/atom+xml",
        "application/ld+json",
        "application/x-ndjson",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/csv",
        "image/svg+xml",
    }
)


class FetchRefused(ToolError):
    """The URL or one of its addresses is not allowed; the message says why (never a secret)."""


@dataclass(frozen=True)
class FetchPolicy:
    """Limits of ``http_fetch``.

    Attributes:
        max_bytes: body bytes kept, at most (a call may ask for fewer).
        timeout: seconds for the whole fetch, redirects included.
        allow_private: ``PICOBOT_HTTP_FETCH_ALLOW_PRIVATE``: loopback/private/link-local allowed.
        max_redirects: redirects followed before giving up.
        resolver: name → addresses; None = the system resolver. Tests inject one.
        allow_address: an extra exemption ``allow_address(ip) -> bool`` checked before the
            refusals (tests: "this one loopback test server counts as public"); None = none.
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    timeout: float = DEFAULT_TIMEOUT
    allow_private: bool = False
    max_redirects: int = MAX_REDIRECTS
    resolver: Resolver | None = None
    allow_address: Callable[[IPAddress], bool] | None = None

    @classmethod
    def from_settings(cls) -> FetchPolicy:
        """The policy of ``settings.PICOBOT`` (``HTTP_FETCH_MAX_BYTES``, ``_TIMEOUT``, ``_ALLOW_PRIVATE``)."""
        from django.conf import settings

        config = settings.PICOBOT
        return cls(
            max_bytes=int(config.get("HTTP_FETCH_MAX_BYTES", DEFAULT_MAX_BYTES)),
            timeout=float(config.get("HTTP_FETCH_TIMEOUT", DEFAULT_TIMEOUT)),
            allow_private=bool(config.get("HTTP_FETCH_ALLOW_PRIVATE", False)),
        )


# --- address and URL checks -----------------------------------------------------------------------


def address_refusal(ip: IPAddress, *, allow_private: bool = False) -> str | None:
    """Why ``ip`` must not be contacted ("loopback", "private", …), or None when it may be.

    IPv6 addresses embedding an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, 6to4, Teredo, NAT64
    ``64:ff9b::a.b.c.d``) are judged by that IPv4 address too.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64:  # a DNS64 answer: exactly as safe as the IPv4 address it carries
            reason = address_refusal(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), allow_private=allow_private)
            return f"{reason} (embedded in {ip})" if reason else None
        embedded = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
        for inner in embedded:
            if inner is not None:
                reason = address_refusal(inner, allow_private=allow_private)
                if reason:
                    return f"{reason} (embedded in {ip})"
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if allow_private:
        return None
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED_ADDRESS_SPACE:
        return "private (shared address space)"
    if ip.is_private or (isinstance(ip, ipaddress.IPv6Address) and ip in _LOCAL_NAT64):
        return "private"
    if ip.is_reserved or not ip.is_global:
        return "not a public address"
    return None


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


class _GuardedTransport(httpx2.AsyncHTTPTransport):
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


# --- body decoding --------------------------------------------------------------------------------


_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def is_text_type(media_type: str) -> bool:
    """Whether a ``Content-Type`` media type (lower case, no parameters) is text ``http_fetch`` returns."""
    return (
        media_type.startswith("text/")
        or media_type in _TEXT_TYPES
        or media_type.endswith("+json")
        or media_type.endswith("+xml")
    )


def _codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name.strip().strip("\"'")).name
    except LookupError:
        return None


def decode_body(body: bytes, media_type: str, charset: str | None) -> str:
    """``body`` as text: the header's charset, else (HTML/XML) a ``<meta charset>``, a BOM, UTF-8.

    Undecodable bytes become U+FFFD, never an error.
    """
    encoding = _codec(charset)
    if encoding is None and body.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    if encoding is None and (body.startswith(codecs.BOM_UTF16_LE) or body.startswith(codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    if encoding is None and ("html" in media_type or "xml" in media_type):
        match = _META_CHARSET.search(body[:4096])
        if match:
            encoding = _codec(match.group(1).decode("ascii", "replace"))
    return body.decode(encoding or "utf-8", errors="replace")


class _TextExtractor(HTMLParser):
    """Readable text of an HTML page: title, blocks as paragraphs, list items and table rows as
    lines, cells separated by ``" | "``; no scripts, styles or other invisible content."""

    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "head"})
    LINE = frozenset({"li", "tr", "br", "dt", "dd", "hr"})
    BLOCK = frozenset(
        {
            "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "ul", "ol",
            "table", "blockquote", "pre", "form", "fieldset", "figure", "figcaption", "dl", "h1",
            "h2", "h3", "h4", "h5", "h6", "address", "details", "summary",
        }
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skip = 0
        self._in_title = False
        self._pre = 0

    def _at_line_start(self) -> bool:
        for part in reversed(self.parts):
            if part:
                return part.endswith("\n")
        return True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in self.SKIP:
            self._skip += 1
        elif self._skip:
            return
        elif tag in self.LINE:
            self.parts.append("\n- " if tag == "li" else "\n")
        elif tag in self.BLOCK:
            self.parts.append("\n\n")
            if tag[0] == "h" and tag[1:].isdigit():
                self.parts.append("#" * int(tag[1:]) + " ")
            elif tag == "pre":
                self._pre += 1
        elif tag in {"td", "th"} and not self._at_line_start():
            self.parts.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        elif not self._skip and tag in self.BLOCK:
            self.parts.append("\n\n")
            if tag == "pre":
                self._pre = max(0, self._pre - 1)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif self._skip:
            return
        elif self._pre:
            self.parts.append(data)
        else:
            text = re.sub(r"\s+", " ", data)
            self.parts.append(text.lstrip() if self._at_line_start() else text)


def html_to_text(html: str) -> str:
    """Readable text of ``html``: ``"Title: …"`` first when there is one, then the body text
    (paragraphs separated by a blank line; ``<pre>`` keeps its spacing)."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    lines = [line.rstrip() for line in "".join(parser.parts).splitlines()]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
    title = " ".join("".join(parser.title).split())
    return f"Title: {title}\n\n{text}" if title else text


# --- fetching -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FetchResult:
    """A fetched page: the final URL, status, media type, decoded text, and whether it was cut."""

    url: str
    status: int
    reason: str
    media_type: str
    text: str
    truncated: bool
    max_bytes: int
    redirects: int

    def render(self) -> str:
        """The tool result: a short header, a blank line, the text."""
        lines = [f"URL: {self.url}", f"Status: {self.status} {self.reason}".rstrip()]
        if self.media_type:
            lines.append(f"Content-Type: {self.media_type}")
        if self.redirects:
            lines.append(f"Redirects followed: {self.redirects}")
        if self.truncated:
            lines.append(
                f"Note: the body was longer than {self.max_bytes} bytes; only the first {self.max_bytes} were read."
            )
        return "\n".join(lines) + "\n\n" + self.text


class _Body:
    """Reads a response body up to ``limit`` bytes, decoding gzip/deflate with the same bound."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            self._decoder = None
        elif encoding in ("gzip", "x-gzip"):
            self._decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._decoder = zlib.decompressobj()
        else:
            raise ToolError(f"the server sent an unsupported content encoding {encoding[:40]!r}")

    def feed(self, raw: bytes) -> bool:
        """Take a raw chunk; False once the limit is reached (stop reading)."""
        if self._decoder is not None:
            try:
                data = self._decoder.decompress(raw, self.limit - self.size + 1)
            except zlib.error as exc:
                raise ToolError("the server sent a corrupt compressed body") from exc
        else:
            data = raw
        room = self.limit - self.size
        if len(data) > room or (self._decoder is not None and self._decoder.unconsumed_tail):
            self.chunks.append(data[:room])
            self.size += min(len(data), room)
            self.truncated = True
            return False
        self.chunks.append(data)
        self.size += len(data)
        return True

    def bytes(self) -> bytes:
        return b"".join(self.chunks)


async def fetch(url: str, policy: FetchPolicy, max_bytes: int | None = None) -> FetchResult:
    """GET ``url`` under ``policy`` (see the module docstring).

    Args:
        url: an absolute http(s) URL.
        policy: limits and address rules.
        max_bytes: a lower body limit for this call (never above ``policy.max_bytes``).

    Raises:
        FetchRefused: the URL, a redirect target or an address is not allowed.
        ToolError: time limit, too many redirects, connection failure, non-text content.
    """
    limit = policy.max_bytes if max_bytes is None else max(1, min(max_bytes, policy.max_bytes))
    try:
        current = httpx2.URL(url.strip())
    except (httpx2.InvalidURL, TypeError, ValueError) as exc:
        raise ToolError(f"invalid URL: {exc}") from exc
    transport = _GuardedTransport(GuardedBackend(policy))
    client = httpx2.AsyncClient(
        transport=transport,
        trust_env=False,
        follow_redirects=False,
        timeout=httpx2.Timeout(policy.timeout),
        headers={
            "User-Agent": USER_AGENT,
            "Accept": "text/*, application/json, */*;q=0.5",
            "Accept-Encoding": "gzip, deflate",
        },
    )
    try:
        async with asyncio.timeout(policy.timeout):
            return await _follow(client, current, policy, limit)
    except TimeoutError as exc:
        raise ToolError(f"http_fetch timed out after {policy.timeout:g} s") from exc
    finally:
        await client.aclose()


async def _follow(
    client: httpx2.AsyncClient, url: httpx2.URL, policy: FetchPolicy, limit: int
) -> FetchResult:
    for redirects in range(policy.max_redirects + 1):
        check_url(url)
        try:
            async with client.stream("GET", url) as response:
                location = response.headers.get("location")
                if response.status_code in REDIRECT_STATUSES and location:
                    try:
                        url = response.url.join(location)
                    except (httpx2.InvalidURL, ValueError) as exc:
                        raise ToolError("the server redirected to an invalid URL") from exc
                    continue
                return await _read(response, limit, redirects)
        except httpx2.TimeoutException as exc:
            raise ToolError(f"http_fetch timed out after {policy.timeout:g} s") from exc
        except httpx2.ConnectError as exc:
            raise ToolError(f"could not connect to {url.host}") from exc
        except httpx2.HTTPError as exc:
            raise ToolError(f"the request to {url.host} failed ({type(exc).__name__})") from exc
    raise ToolError(f"too many redirects (more than {policy.max_redirects})")


async def _read(response: httpx2.Response, limit: int, redirects: int) -> FetchResult:
    content_type = response.headers.get("content-type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type and not is_text_type(media_type):
        raise ToolError(f"the content type {media_type[:80]!r} is not text; http_fetch returns text only")
    body = _Body(response.headers.get("content-encoding", ""), limit)
    async for raw in response.aiter_raw():
        if not body.feed(raw):
            break
    data = body.bytes()
    if not media_type and b"\x00" in data[:1024]:  # untyped: text only when it looks like it
        raise ToolError("the response has no content type and is not text")
    text = decode_body(data, media_type, response.charset_encoding)
    if "html" in media_type:
        text = html_to_text(text)
    return FetchResult(
        url=str(response.url),
        status=response.status_code,
        reason=response.reason_phrase,
        media_type=media_type,
        text=text,
        truncated=body.truncated,
        max_bytes=limit,
        redirects=redirects,
    )


def http_fetch_tool(policy: FetchPolicy | None = None) -> Tool:
    """The ``http_fetch`` tool definition (policy: default ``FetchPolicy.from_settings()``).

    Its own timeout is the fetch's time limit plus 2 s, so the fetch's clearer message wins.
    """
    policy = policy or FetchPolicy.from_settings()

    async def http_fetch(arguments: dict) -> str:
        result = await fetch(arguments["url"], policy, arguments.get("max_bytes"))
        return result.render()

    return Tool(
        name="http_fetch",
        description=(
            "Fetch a public web page or text resource by HTTP GET and return it as text (HTML is "
            "reduced to readable text). http/https only; private and local addresses are refused."
        ),
        parameters={
            "type": "object",
            "properties": {
                "url": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 2048,
                    "description": "Absolute http(s) URL.",
                },
                "max_bytes": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": policy.max_bytes,
                    "description": f"Read at most this many bytes of the body (default and maximum {policy.max_bytes}).",
                },
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        handler=http_fetch,
        timeout=policy.timeout + 2.0,
    )
