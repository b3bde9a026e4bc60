"""The Markdown parser of the transcript: links keep their address in the text.

A terminal (tmux above all) may show a link's text with no sign of where it points, so after a
link whose text is not its address the address follows in brackets: ``[docs](https://x.org)``
reads "docs (https://x.org)". A bare URL, or a link whose text is its address, stays as it is.
Clicking a link still opens it (Textual's ``Markdown``). Pure: markdown-it tokens in and out.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token


def parser() -> MarkdownIt:
    """Textual's "gfm-like" parser plus :func:`show_link_addresses` (its ``parser_factory``)."""
    md = MarkdownIt("gfm-like")
    md.core.ruler.push("show_link_addresses", show_link_addresses)
    return md


def show_link_addresses(state: StateCore) -> None:
    """After each ``link_close`` whose link text differs from its href, a text token `` (href)``."""
    for block in state.tokens:
        if block.type != "inline" or not block.children:
            continue
        out: list[Token] = []
        href, text = "", []
        for token in block.children:
            out.append(token)
            if token.type == "link_open":
                href, text = str(token.attrs.get("href") or ""), []
            elif token.type in ("text", "code_inline") and href:
                text.append(token.content)
            elif token.type == "link_close" and href:
                if not _same(href, "".join(text)):
                    address = Token("text", "", 0)
                    address.content = f" ({href})"
                    out.append(address)
                href = ""
        block.children = out


def _same(href: str, text: str) -> bool:
    """True when the text already shows the address (``x.org`` for ``https://x.org``, ``a@b``
    for ``mailto:a@b``)."""
    bare = href.removeprefix("mailto:").removeprefix("https://").removeprefix("http://").rstrip("/")
    return text.strip().rstrip("/") in (href.rstrip("/"), bare)
