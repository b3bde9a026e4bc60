"""``http_fetch``'s page text: HTML reduction in linear work, charsets limited to text encodings.

A 240 KB page of ``"<i> " * 60000`` must not take seconds (no text piece scanned back over every
piece before it); the stdlib ``html.parser`` of this Python is quadratic on unclosed
constructs (``<a<a<a…``, ``<!--<!--…``) and raises on ``<![``, and ``charset=punycode/rot13/idna``
are quadratic or crash, so none of them is used. Work is measured deterministically: the Python lines executed for a
page and for the same page four times as long (no wall-clock asserts).
"""

from __future__ import annotations

import _markupbase
import html
import html.parser
import sys
import threading

import pytest

from conversations.tools.http_fetch import decode_body, html_text, html_to_text, page_text, text_codec

_TRACED = {html_text.__file__, html.__file__, html.parser.__file__, _markupbase.__file__}


def lines_executed(function, *args) -> int:
    """Python lines run in the HTML reduction's modules (and the stdlib parser's) by ``function(*args)``."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename in _TRACED else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        function(*args)
    finally:
        sys.settrace(previous)
    return count


HOSTILE_PATTERNS = {
    "QA's <i> run": "<i> ",
    "nested blocks": "<div><section><li>",
    "table cells": "<td>x",
    "headings": "<h6>",
    "named entities": "&amp;&lt;&deg;",
    "numeric entities": "&#65;&#x42;",
    "unclosed tags": "<a",
    "unclosed end tags": "</",
    "unclosed comments": "<!--",
    "unclosed declarations": "<!",
    "unclosed processing instructions": "<?",
    "marked sections": "<![",
    "unclosed quotes": "<a b='",
    "quoted >": '<a b="x>" \'',
    "stray <": "<<x",
    "scripts": "<script>",
    "preformatted": "<pre> \n",
}


def page(pattern: str, size: int) -> str:
    return (pattern * (size // len(pattern) + 1))[:size]


@pytest.mark.parametrize("pattern", list(HOSTILE_PATTERNS.values()), ids=list(HOSTILE_PATTERNS))
def test_html_to_text_work_grows_linearly_with_a_hostile_page(pattern):
    small = lines_executed(html_to_text, page(pattern, 8 * 1024))
    large = lines_executed(html_to_text, page(pattern, 32 * 1024))

    # Linear work: 4x the page, about 4x the lines (the old extractor: about 16x, or worse).
    assert large <= 6 * max(small, 50), (small, large)


def test_a_one_mebibyte_hostile_page_converts():
    unit = "<p>" + "<i> " * 1000 + "<div><b>&amp;</b>"
    body = unit * (1024 * 1024 // len(unit))

    text = html_to_text(body)

    assert len(body) > 1000 * 1024
    assert text == "\n\n".join(["&"] * (1024 * 1024 // len(unit)))


UNCLOSED = ["unclosed tags", "unclosed end tags", "unclosed comments", "unclosed declarations"]
UNCLOSED += ["unclosed processing instructions", "marked sections", "unclosed quotes"]


@pytest.mark.parametrize("name", UNCLOSED)
def test_one_mebibyte_of_unclosed_constructs_converts(name):
    """The stdlib parser's cost here is in C (each ``<`` rescans to the end: minutes for 1 MiB),
    which line counts cannot see; the tokenizer consumes what it scans, so these return at once."""
    body = "<p>before</p>" + page(HOSTILE_PATTERNS[name], 1024 * 1024)

    assert html_to_text(body) == "before"


def test_qas_page_at_one_mebibyte_is_only_its_text():
    body = "<html><body><p>" + "<i> " * (256 * 1024 - 8) + "end</p></body></html>"

    assert html_to_text(body) == "end"


@pytest.mark.parametrize(
    ("markup", "text"),
    [
        ("<p>a<!-- hidden <b>x</b> -->b</p>", "ab"),
        ("<p>kept</p><!-- never closed <p>gone</p>", "kept"),  # as in a browser: the rest is comment
        ("<p>kept</p><a href='x", "kept"),  # a tag never closed takes the rest
        ("<![CDATA[x]]><p>after</p>", "after"),  # the stdlib parser raised AssertionError
        ("<![<![<![<![ x", ""),
        ("a &#" + "9" * 5000 + "; b", "a \ufffd b"),  # html.unescape raised ValueError (int digits)
        ("&#x110000; &#0000065; &#x41;", "\ufffd A A"),
        ("<a title='1 > 0'>link</a> text", "link text"),
        ("<script>if (a<b) document.write('</div><p>x')</script><p>shown</p>", "shown"),
        ("<title>A <b>bold</b> &amp; title</title><p>body</p>", "Title: A <b>bold</b> & title\n\nbody"),
        (
            "<head><title>first</title></head><svg><title>icon</title></svg><p>body</p>",
            "Title: first\n\nbody",
        ),
        ("<p>x<br/>y</p><div/>z", "x\ny\n\nz"),
        ("1 < 2 and 3 <= 4", "1 < 2 and 3 <= 4"),
        ("<P>Upper <LI>item</P>", "Upper\n- item"),
        ("<ul><li>one<li>two</ul>", "- one\n- two"),
        ("<table><tr><th>a</th><td>b</td></tr><tr><td>c</td></tr></table>", "a | b\nc"),
        ("<!DOCTYPE html><?xml x?></ x><p>ok</p>", "ok"),
    ],
)
def test_html_to_text_reads_malformed_markup_like_a_browser_without_raising(markup, text):
    assert html_to_text(markup) == text


def test_a_stopped_reduction_ends_early():
    stop = threading.Event()
    stop.set()

    with pytest.raises(html_text._Stopped):
        html_to_text("<i>x</i>" * 10_000, stop)


@pytest.mark.parametrize(
    "label",
    [
        "punycode",
        "idna",
        "rot13",
        "rot_13",
        "uu",
        "base64",
        "hex",
        "quopri",
        "zlib",
        "bz2",
        "unicode_escape",
        "raw_unicode_escape",
        "utf-7",
        "x-user-defined",
        "no-such-charset",
        "utf-8\x00",
        "",
        "x" * 5000,
    ],
)
def test_a_charset_that_is_no_web_text_encoding_counts_as_none(label):
    assert text_codec(label) is None
    assert decode_body(b"caf\xc3\xa9 \xff", "text/plain", label) == "café \ufffd"
    assert decode_body(b"caf\xc3\xa9 " * 1000, "text/html", label) == "café " * 1000


@pytest.mark.parametrize(
    ("label", "codec"),
    [
        ("UTF-8", "utf-8"),
        ("utf8", "utf-8"),
        ('"utf-8"', "utf-8"),
        ("iso-8859-1", "cp1252"),
        ("latin1", "cp1252"),
        ("us-ascii", "cp1252"),
        ("windows-1251", "cp1251"),
        ("windows-874", "cp874"),
        ("gb2312", "gbk"),
        ("GBK", "gbk"),
        ("gb18030", "gb18030"),
        ("Shift_JIS", "shift_jis"),
        ("windows-31j", "cp932"),
        ("euc-kr", "cp949"),
        ("big5", "big5"),
        ("koi8-r", "koi8-r"),
        ("utf-16le", "utf-16-le"),
    ],
)
def test_web_charset_labels_map_to_their_codecs(label, codec):
    assert text_codec(label) == codec


def test_a_meta_charset_is_used_only_when_it_names_a_web_encoding():
    gbk = '<meta charset="gbk"><p>中文</p>'.encode("gbk")
    puny = b'<meta charset="punycode"><p>caf\xc3\xa9</p>'
    utf16 = b'<meta charset="utf-16"><p>caf\xc3\xa9</p>'  # ASCII bytes cannot be UTF-16: read UTF-8

    assert page_text(gbk, "text/html", None) == "中文"
    assert page_text(puny, "text/html", None) == "café"
    assert page_text(utf16, "text/html", None) == "café"
