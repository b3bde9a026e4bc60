"""The ``http_fetch`` tool: GET a public web page as text (rules in ``tools/README.md``).

``addresses`` (which IPs may be contacted, pure), ``guard`` (URL checks, connections only to
checked addresses), ``decoding`` (bodies to text, pure), ``html_text`` (HTML to readable text,
pure), ``policy`` (the limits) and ``tool`` (the fetch loop and the tool definition).
"""

from __future__ import annotations

from conversations.tools.http_fetch.addresses import address_refusal
from conversations.tools.http_fetch.decoding import decode_body, is_text_type, page_text, text_codec
from conversations.tools.http_fetch.html_text import html_to_text
from conversations.tools.http_fetch.policy import FetchPolicy, FetchRefused
from conversations.tools.http_fetch.tool import FetchResult, fetch, http_fetch_tool

__all__ = [
    "FetchPolicy",
    "FetchRefused",
    "FetchResult",
    "address_refusal",
    "decode_body",
    "fetch",
    "html_to_text",
    "http_fetch_tool",
    "is_text_type",
    "page_text",
    "text_codec",
]
