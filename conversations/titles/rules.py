"""Dialog titles: the title request and the cleaning of the model's answer (seed 004 §5.4).

A dialog whose title is still the default gets a generated one when its Nth user message is
committed (DESIGN §6; ``conversations.runtime.titles`` runs it in the background, seed 000 §12).
The model sees the first user/assistant rows' visible text only — never reasoning, tool calls or
tool results (DESIGN §6: reasoning never leaves into other requests). Its answer is cleaned by
:func:`clean_title`: think spans stripped, and a reasoning-only or unterminated-think answer
yields no title at all (the default stays).

Pure module: no Django, no I/O.
"""

from __future__ import annotations

import re
import unicodedata

from providers.messages import RUNTIME_CONTEXT_MARKER, Message
from providers.types import ProviderRequest

MAX_TITLE_CHARS = 80
TITLE_INSTRUCTIONS = (
    "You name conversations. Reply with ONE short title that sums up what the conversation below is "
    "about or what the user wants: about 3 to 8 words, or 5 to 15 characters when the conversation "
    "is in Chinese, Japanese or Korean. Write the title in the language of the conversation. Reply "
    "with the title only: no quotes, no 'Title:' prefix, no explanation, no punctuation at the end."
)

_TAGS = "think|thought|reasoning"
_CLOSED_SPAN = re.compile(rf"<({_TAGS})>.*?</\1>", re.IGNORECASE | re.DOTALL)
_OPEN_TAG = re.compile(rf"<(?:{_TAGS})>", re.IGNORECASE)
_CLOSE_TAG = re.compile(rf"</(?:{_TAGS})>", re.IGNORECASE)
_PREFIX = re.compile(
    r"^(?:title|chat title|conversation title|标题|標題|题目|主题)\s*[:：]\s*", re.IGNORECASE
)
_QUOTE_PAIRS = {
    '"': '"',
    "'": "'",
    "“": "”",
    "‘": "’",
    "「": "」",
    "『": "』",
    "《": "》",
    "«": "»",
    "`": "`",
}
# Never at the end of a title; "?" and "!" stay unless the title had to be cut.
# Terminal escape sequences (CSI/OSC/other ESC forms): dropped whole, before single characters.
_ESCAPES = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]"
)
# What a user title may not hold (``storage.clean_user_title``): control, surrogate, private-use
# and unassigned characters. Format characters (ZWJ emoji, Persian ZWNJ) stay.
_UNSHOWABLE = ("Cc", "Cs", "Co", "Cn")
_TRAILING = ".,;:。，；：、…-–— "
_TRAILING_CUT = _TRAILING + "?!？！"


def strip_reasoning(text: str, *, cut_unterminated: bool = False) -> str | None:
    """``text`` without inline reasoning spans (``<think>``, ``<thought>``, ``<reasoning>``).

    Closed spans are removed (tags matched case-insensitively, DESIGN §6); a closing tag with no
    opening one (a model that starts inside its reasoning, seed 003 §7.2 "implicit start") drops
    everything before it. ``providers.think.ThinkTagSplitter`` is the streaming counterpart; this
    works on a whole text at once and is stricter about an unclosed span, because a half-thought
    must never become a title or a summary.

    Args:
        text: a whole model answer or stored message text.
        cut_unterminated: what an opening tag that is never closed means. False (for a model's
            answer): the answer is unusable, return None. True (for input text): keep what
            precedes the tag.

    Returns:
        The visible text, stripped; None when nothing visible is left, or for an unterminated
        span unless ``cut_unterminated``.
    """
    visible = _CLOSED_SPAN.sub(" ", text)
    closes = list(_CLOSE_TAG.finditer(visible))
    if closes:
        visible = visible[closes[-1].end() :]
    opening = _OPEN_TAG.search(visible)
    if opening:
        if not cut_unterminated:
            return None
        visible = visible[: opening.start()]
    visible = visible.strip()
    return visible or None


def build_title_request(rows: list[dict], *, max_rows: int = 20, max_chars: int = 4000) -> ProviderRequest:
    """The provider request asking for one short title (seed 004 §5.4).

    Args:
        rows: history rows, oldest first, as ``storage.message_to_protocol`` dicts; only
            ``role`` and ``content`` of ``user`` and ``assistant`` rows are read (never
            ``reasoning``, tool calls or tool rows).
        max_rows: how many of the first usable rows go into the prompt.
        max_chars: the prompt's conversation text budget, in characters; a long row is cut
            (with ``…``) to its share.

    Returns:
        A request of a system message (the instructions) and one user message (the conversation).

    Raises:
        ValueError: no row has visible text (nothing to name).
    """
    lines: list[str] = []
    budget = max_chars
    per_row = max(200, max_chars // 4)
    for row in rows:
        if len(lines) >= max_rows or budget <= 0:
            break
        text = _row_text(row)
        if not text:
            continue
        limit = min(per_row, budget)
        if len(text) > limit:
            text = text[: limit - 1].rstrip() + "…"
        budget -= len(text)
        lines.append(f"{'User' if row['role'] == 'user' else 'Assistant'}: {text}")
    if not lines:
        raise ValueError("no visible text to make a title from")
    conversation = "\n\n".join(lines)
    return ProviderRequest(
        messages=[
            Message.system(TITLE_INSTRUCTIONS),
            Message.user(f"Conversation:\n\n{conversation}\n\nReply with the title only."),
        ]
    )


def _row_text(row: dict) -> str:
    role = row.get("role")
    content = row.get("content") or ""
    if role == "user":
        # Runtime context is never stored, but a row built for a request might carry it.
        return content.split(RUNTIME_CONTEXT_MARKER, 1)[0].strip()
    if role == "assistant":
        return strip_reasoning(content, cut_unterminated=True) or ""
    return ""


def clean_title(text: str) -> str | None:
    """The title in a model's answer, or None when the answer holds none.

    Think spans are stripped (:func:`strip_reasoning`); an unterminated think block, a
    reasoning-only or an empty answer gives None (the default title stays, DESIGN §6). Terminal
    escape sequences and characters a user title may not hold (control, private-use, unassigned,
    lone surrogates) are removed, so a generated title obeys the user-title rule and survives
    export → import. Of the rest, the first line that still has text after removing markdown (``#``, ``**``, a bullet),
    surrounding quotes and a ``Title:`` / ``标题：`` prefix; whitespace collapsed; at most
    :data:`MAX_TITLE_CHARS` characters (cut at a word boundary when there is one in the second
    half), with no trailing punctuation.
    """
    visible = strip_reasoning(text or "")
    if visible is None:
        return None
    visible = _ESCAPES.sub("", visible)
    visible = "".join(
        c if c in "\n\t" or unicodedata.category(c) not in _UNSHOWABLE else " " for c in visible
    )
    for line in visible.splitlines():
        title = " ".join(_unwrap(line).split())
        if title:
            break
    else:
        return None
    if len(title) > MAX_TITLE_CHARS:
        cut = title[: MAX_TITLE_CHARS + 1]
        space = cut.rfind(" ")
        title = cut[:space] if space >= MAX_TITLE_CHARS // 2 else title[:MAX_TITLE_CHARS]
        title = title.rstrip(_TRAILING_CUT)
    else:
        title = title.rstrip(_TRAILING)
    return title or None


def _unwrap(line: str) -> str:
    """One line without markdown decoration, a ``Title:`` prefix and surrounding quotes."""
    previous = None
    while line != previous:
        previous = line
        line = line.strip()
        line = line.lstrip("#").strip()
        if line.startswith(("- ", "• ")):
            line = line[2:]
        line = line.strip("*").strip()
        line = _PREFIX.sub("", line).rstrip(_TRAILING)
        if len(line) >= 2 and _QUOTE_PAIRS.get(line[0]) == line[-1]:
            inner = line[1:-1]
            # '"A" vs "B"' is two quotes, not one quoted title (an apostrophe inside is a word's).
            if line[0] == "'" or (line[0] not in inner and line[-1] not in inner):
                line = inner
    return line
