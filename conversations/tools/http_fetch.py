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
  UTF-8), decoded by its charset when that names a web text encoding (else UTF-8; never a codec
  such as ``punycode`` or ``rot13``); HTML is reduced to readable text by a tokenizer that is
  linear in the page. Decoding and HTML reduction run on a worker thread, so a big or hostile
  page never blocks the event loop (other dialogs, ``/stop``, the time limit). The result names
  the final URL, status and content type, never other response headers (cookies).
"""

from __future__ import annotations

import asyncio
import codecs
import ipaddress
import re
import socket
import threading
import zlib
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html import unescape as html_unescape
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
_WEB_CODECS = frozenset(
    {
        "utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be",
        "cp1250", "cp1251", "cp1252", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257", "cp1258",
        "cp874", "cp866", "koi8-r", "koi8-u", "mac-roman", "mac-cyrillic", "tis-620",
        "iso8859-2", "iso8859-3", "iso8859-4", "iso8859-5", "iso8859-6", "iso8859-7", "iso8859-8",
        "iso8859-9", "iso8859-10", "iso8859-11", "iso8859-13", "iso8859-14", "iso8859-15", "iso8859-16",
        "gbk", "gb18030", "big5", "big5hkscs", "cp950", "euc_jp", "iso2022_jp", "shift_jis", "cp932",
        "euc_kr", "cp949", "iso2022_kr",
    }
)  # fmt: skip
"""Python codecs of the web's text encodings (WHATWG Encoding Standard) plus UTF-32. A charset that
names any other codec — ``punycode`` (quadratic), ``idna`` (fails on bad bytes), ``rot13``,
``base64``, ``zlib``, ``unicode_escape`` (not text encodings), ``utf-7`` — is ignored."""
_CHARSET_LABELS = {
    "windows-874": "cp874",
    "x-mac-cyrillic": "mac-cyrillic",
    "windows-31j": "cp932",
    "x-sjis": "shift_jis",
    "windows-949": "cp949",
    "x-gbk": "gbk",
    "iso-8859-8-i": "iso8859-8",
}
"""Web labels Python's codec registry does not know, and the codec they name."""
_CHARSET_SUPERSETS = {"ascii": "cp1252", "iso8859-1": "cp1252", "gb2312": "gbk", "euc_kr": "cp949"}
"""Labels pages use for a superset (as browsers read them): ``iso-8859-1`` pages hold cp1252 quotes."""


def text_codec(label: str | None) -> str | None:
    """The Python codec of a ``charset`` label, or None when it names no web text encoding."""
    if not label:
        return None
    name = label.strip().strip("\"'").strip().lower()
    if not name or len(name) > 40:
        return None
    name = _CHARSET_LABELS.get(name, name)
    try:
        codec = codecs.lookup(name).name
    except (LookupError, ValueError, TypeError):
        return None
    codec = _CHARSET_SUPERSETS.get(codec, codec)
    return codec if codec in _WEB_CODECS else None


def is_text_type(media_type: str) -> bool:
    """Whether a ``Content-Type`` media type (lower case, no parameters) is text ``http_fetch`` returns."""
    return (
        media_type.startswith("text/")
        or media_type in _TEXT_TYPES
        or media_type.endswith("+json")
        or media_type.endswith("+xml")
    )


def decode_body(body: bytes, media_type: str, charset: str | None) -> str:
    """``body`` as text: the header's charset, else (HTML/XML) a ``<meta charset>``, a BOM, UTF-8.

    Only web text encodings are used (:func:`text_codec`); another charset counts as none.
    Undecodable bytes become U+FFFD, never an error.
    """
    encoding = text_codec(charset)
    if encoding is None and body.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    if encoding is None and (body.startswith(codecs.BOM_UTF16_LE) or body.startswith(codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    if encoding is None and ("html" in media_type or "xml" in media_type):
        match = _META_CHARSET.search(body[:4096])
        if match:
            encoding = text_codec(match.group(1).decode("ascii", "replace"))
            if encoding and encoding.startswith(("utf-16", "utf-32")):
                encoding = "utf-8"  # an ASCII <meta> cannot be in UTF-16/32 (browsers read UTF-8)
    return body.decode(encoding or "utf-8", errors="replace")


_MARKUP = re.compile(r"<[A-Za-z/!?]")
_TAG_OPEN = re.compile(r"<(/?)([A-Za-z][^\t\n\r\f />\x00]*)")
_ATTRIBUTES = re.compile(r"""(?:[^>"'=]+|=\s*(?:"[^"]*"|'[^']*'|[^\s>]*)|["'=])*""")
"""A tag's attributes up to its ``>`` (or the end): a quoted value may hold ``>``. Every branch
consumes, and a failed quote (no closing quote left in the page) can happen once per quote kind,
so matching stays linear."""
_BIG_CHARREF = re.compile(r"&#(?:[xX]0*+[0-9a-fA-F]{7,}|0*+[0-9]{8,});?")
"""A numeric character reference beyond U+10FFFF: ``html.unescape`` would turn its digits into an
int (a ValueError past 4300 digits); it reads as U+FFFD anyway."""
_RAW_END: dict[str, re.Pattern[str]] = {}


class _Stopped(Exception):
    """The caller no longer waits for the text (``html_to_text``'s ``stop`` was set)."""


def _unescape(text: str) -> str:
    if "&" not in text:
        return text
    return html_unescape(_BIG_CHARREF.sub("\ufffd", text))


def _raw_end(tag: str) -> re.Pattern[str]:
    pattern = _RAW_END.get(tag)
    if pattern is None:
        pattern = _RAW_END[tag] = re.compile(rf"</{re.escape(tag)}(?=[\t\n\r\f />])", re.IGNORECASE)
    return pattern


class _TextExtractor:
    """Readable text of an HTML page: title, blocks as paragraphs, list items and table rows as
    lines, cells separated by ``" | "``; no scripts, styles or other invisible content.

    Its tokenizer is linear in the page (each step consumes what it scanned; an unclosed comment,
    tag or raw-text element ends the page, as in a browser), so a hostile page costs no more than
    a plain one of the same size; the stdlib ``html.parser`` of Python < 3.11.13 is quadratic on
    some malformed input (CVE-2025-6069) and raises on others (``<![``).
    """

    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "head"})
    LINE = frozenset({"li", "tr", "br", "dt", "dd", "hr"})
    BLOCK = frozenset(
        {
            "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "ul", "ol",
            "table", "blockquote", "pre", "form", "fieldset", "figure", "figcaption", "dl", "h1",
            "h2", "h3", "h4", "h5", "h6", "address", "details", "summary",
        }
    )  # fmt: skip
    RAW_TEXT = frozenset({"script", "style", "xmp", "iframe", "noembed", "noframes", "noscript"})
    """Elements whose content is text up to their end tag, never markup (no entities either)."""
    RCDATA = frozenset({"title", "textarea"})
    """Elements whose content is text up to their end tag, with character references."""
    CHECK_EVERY = 1024
    """Tokens between two looks at ``stop``."""

    def __init__(self, stop: threading.Event | None = None) -> None:
        self.parts: list[str] = []  # never an empty piece
        self.title: str | None = None
        self.steps = 0
        """Tokenizer steps taken (one per markup construct; tests bound it)."""
        self._skip = 0
        self._pre = 0
        self._line_start = True  # whether the text so far ends a line
        self._stop = stop

    def _emit(self, piece: str) -> None:
        if piece:
            self.parts.append(piece)
            self._line_start = piece.endswith("\n")

    def feed(self, html: str) -> None:
        """Read the whole page (call once).

        Raises:
            _Stopped: ``stop`` was set.
        """
        n = len(html)
        pos = text_from = 0  # next unread character; start of the text not yet handled
        while True:
            self.steps += 1
            if self._stop is not None and self.steps % self.CHECK_EVERY == 1 and self._stop.is_set():
                raise _Stopped
            found = _MARKUP.search(html, pos)
            if found is None:
                break
            lt = found.start()
            tag = _TAG_OPEN.match(html, lt)
            if tag is None:  # a comment, a declaration (<!DOCTYPE, <![CDATA[), a PI, a bogus </…>
                if html.startswith("<!--", lt):
                    close = html.find("-->", lt + 2)  # "<!-->" and "<!--->" close at once
                    end = -1 if close < 0 else max(close + 3, lt + 5)
                else:
                    close = html.find(">", lt + 2)
                    end = -1 if close < 0 else close + 1
                self._flush(html, text_from, lt)
                if end < 0:  # never closed: the rest of the page is inside it
                    return
                pos = text_from = end
                continue
            gt = _ATTRIBUTES.match(html, tag.end()).end()
            self._flush(html, text_from, lt)
            if gt >= n:  # a tag never closed: the rest of the page is inside it
                return
            pos = text_from = gt + 1
            name = tag.group(2).lower()
            if tag.group(1):
                self._end(name)
                continue
            self._start(name)
            if gt > tag.end() and html[gt - 1] == "/":
                self._end(name)
            elif name in self.RAW_TEXT or name in self.RCDATA:
                close_tag = _raw_end(name).search(html, pos)
                end = close_tag.start() if close_tag else n
                content = html[pos:end]
                if name == "title":
                    if self.title is None:
                        self.title = _unescape(content)
                else:
                    self._data(_unescape(content) if name in self.RCDATA else content)
                pos = text_from = end
        self._flush(html, text_from, n)

    def _flush(self, html: str, start: int, end: int) -> None:
        if end > start:
            self._data(_unescape(html[start:end]))

    def _start(self, tag: str) -> None:
        if tag in self.SKIP:
            self._skip += 1
        elif self._skip:
            return
        elif tag in self.LINE:
            self._emit("\n- " if tag == "li" else "\n")
        elif tag in self.BLOCK:
            self._emit("\n\n")
            if tag[0] == "h" and tag[1:].isdigit():
                self._emit("#" * int(tag[1:]) + " ")
            elif tag == "pre":
                self._pre += 1
        elif tag in {"td", "th"} and not self._line_start:
            self._emit(" | ")

    def _end(self, tag: str) -> None:
        if tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        elif not self._skip and tag in self.BLOCK:
            self._emit("\n\n")
            if tag == "pre":
                self._pre = max(0, self._pre - 1)

    def _data(self, data: str) -> None:
        if self._skip:
            return
        if self._pre:
            self._emit(data)
        else:
            text = _WHITESPACE.sub(" ", data)
            self._emit(text.lstrip() if self._line_start else text)


_WHITESPACE = re.compile(r"\s+")


def html_to_text(html: str, stop: threading.Event | None = None) -> str:
    """Readable text of ``html``: ``"Title: …"`` first when there is one, then the body text
    (paragraphs separated by a blank line; ``<pre>`` keeps its spacing).

    Linear in ``len(html)`` whatever the markup (see ``_TextExtractor``).

    Args:
        html: the page.
        stop: set by a caller that stopped waiting: the work ends early (``_Stopped``).
    """
    parser = _TextExtractor(stop)
    parser.feed(html)
    lines = [line.rstrip() for line in "".join(parser.parts).splitlines()]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
    title = " ".join((parser.title or "").split())
    return f"Title: {title}\n\n{text}" if title else text


def page_text(body: bytes, media_type: str, charset: str | None, stop: threading.Event | None = None) -> str:
    """The text ``http_fetch`` returns for a body: decoded (:func:`decode_body`), HTML reduced to
    readable text (:func:`html_to_text`). CPU-bound: ``fetch`` runs it on a worker thread."""
    text = decode_body(body, media_type, charset)
    return html_to_text(text, stop) if "html" in media_type else text


_PARSE_THREADS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="http_fetch-text")
"""Where page text is made, off the event loop (bounded: parsing holds the GIL, so more threads
would only take more of the loop's time)."""


async def page_text_off_loop(body: bytes, media_type: str, charset: str | None) -> str:
    """:func:`page_text` on a worker thread, so a big page never blocks the event loop: a time
    limit, ``/stop`` and other dialogs go on meanwhile. A cancelled wait stops the work early."""
    stop = threading.Event()
    future = asyncio.get_running_loop().run_in_executor(
        _PARSE_THREADS, page_text, body, media_type, charset, stop
    )
    try:
        return await future
    finally:
        stop.set()


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
    """Reads a response body up to ``limit`` bytes, decoding gzip/deflate with the same bound.

    ``deflate`` is the zlib format (RFC 9110 §8.4.1.2), but many servers send raw DEFLATE
    (RFC 1951) under that name, and browsers accept both: the zlib wrapper is tried first, and a
    body whose first bytes are not a zlib header is read again as raw DEFLATE.
    """

    def __init__(self, encoding: str, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False
        self._undecided: bytes | None = None  # deflate: the raw bytes before the header was checked
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            self._decoder = None
        elif encoding in ("gzip", "x-gzip"):
            self._decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._decoder = zlib.decompressobj()
            self._undecided = b""
        else:
            raise ToolError(f"the server sent an unsupported content encoding {encoding[:40]!r}")

    def _decompress(self, raw: bytes) -> bytes:
        assert self._decoder is not None
        bound = self.limit - self.size + 1  # decompression-bomb safe: never more than the limit
        if self._undecided is None:
            return self._decoder.decompress(raw, bound)
        seen = self._undecided + raw
        try:
            data = self._decoder.decompress(raw, bound)
        except zlib.error:  # zlib checks its 2-byte header first: this is raw DEFLATE
            self._undecided = None
            self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)
            return self._decoder.decompress(seen, bound)
        self._undecided = None if len(seen) >= 2 else seen  # the header passed: zlib it is
        return data

    def feed(self, raw: bytes) -> bool:
        """Take a raw chunk; False once the limit is reached (stop reading).

        Raises:
            ToolError: the compressed body is corrupt.
        """
        if self._decoder is not None:
            try:
                data = self._decompress(raw)
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


def _is_utf8(data: bytes, truncated: bool) -> bool:
    """Whether ``data`` is UTF-8 text, with no NUL in its first KiB (binary formats have one
    there). A body cut at the size limit may end inside a character: that last, incomplete one
    is not held against it."""
    if b"\x00" in data[:1024]:
        return False
    if data.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(data, final=not truncated)
    except UnicodeDecodeError:
        return False
    return True


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
    if not media_type and not _is_utf8(data, body.truncated):  # untyped: text only when it is UTF-8
        raise ToolError("the response has no content type and is not UTF-8 text; http_fetch returns text only")
    text = await page_text_off_loop(data, media_type, response.charset_encoding)
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
