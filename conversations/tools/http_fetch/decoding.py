"""Response bodies as text (pure): which content types count as text, the size-bounded reader
(gzip/deflate decoded under the same bound), charsets limited to web text encodings.

Nothing here raises on undecodable bytes (they become U+FFFD); :class:`BodyReader` raises
``ToolError`` for an unsupported or corrupt content encoding.
"""

from __future__ import annotations

import codecs
import re
import threading
import zlib

from conversations.agent.tool_registry import ToolError
from conversations.tools.http_fetch.html_text import html_to_text

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


def is_text_type(media_type: str) -> bool:
    """Whether a ``Content-Type`` media type (lower case, no parameters) is text ``http_fetch`` returns."""
    return (
        media_type.startswith("text/")
        or media_type in _TEXT_TYPES
        or media_type.endswith("+json")
        or media_type.endswith("+xml")
    )


def is_utf8(data: bytes, truncated: bool) -> bool:
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


class BodyReader:
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


def page_text(body: bytes, media_type: str, charset: str | None, stop: threading.Event | None = None) -> str:
    """The text ``http_fetch`` returns for a body: decoded (:func:`decode_body`), HTML reduced to
    readable text (:func:`html_to_text`). CPU-bound: ``fetch`` runs it on a worker thread."""
    text = decode_body(body, media_type, charset)
    return html_to_text(text, stop) if "html" in media_type else text
