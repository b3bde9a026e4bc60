"""HTML reduced to readable text (pure): :func:`html_to_text`.

The title first, blocks as paragraphs, list items and table rows as lines, no scripts, styles or
other invisible content. The tokenizer is linear in the page whatever the markup, so a hostile
page costs no more than a plain one of the same size; it never raises on malformed markup.
"""

from __future__ import annotations

import re
import threading
from html import unescape as html_unescape

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
