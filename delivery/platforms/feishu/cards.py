"""What a Feishu answer card shows: a turn snapshot as Markdown, and the card JSON around it.

The answer is one CardKit card (FEISHU.md §9) in card JSON 2.0 with ONE markdown element,
:data:`ANSWER_ELEMENT`. While the turn runs its text is :func:`render_markdown`: the presented
blocks in order — assistant text as written, each tool call as one compact line — then a working
indicator chosen from the phase (the card is the spinner; seed 003 §6.4). The terminal text is
:func:`render_final`: the blocks without the indicator, plus what ended the turn (failed,
stopped, cut off at the output limit, no answer at all; seed 003 §7.4, §10.3).

Reasoning never appears: the external policy already removed it (seed 003 §11) and these
functions skip reasoning blocks again, defensively.

Every text returned here is safe to send: never empty (CardKit content is 1..100000 characters),
lone surrogates replaced by U+FFFD and NUL removed (a streaming card left with an unencodable
character ends showing "?", a known peer bug), and ``<at`` tags neutralised so a model or a tool
preview cannot mention people (``<at id=all></at>`` would notify a whole group).

Sizes: a card is at most 30 KB of JSON (FEISHU.md §9). A text is measured by :func:`text_size`
(UTF-8 bytes of its JSON string, escapes included) and a card's text is kept within
:data:`CARD_TEXT_BUDGET`; longer answers are split (:mod:`.split`) by the sink.

Pure: no Django, Channels or HTTP client imports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from delivery.platforms.feishu.split import split_markdown
from delivery.snapshot import ASSISTANT, TOOL, ToolStatus, TurnPhase, TurnSnapshot, TurnStatus
from providers.unicode_text import scrub_text

__all__ = [
    "ANSWER_ELEMENT",
    "CARD_TEXT_BUDGET",
    "CONTINUED_NOTE",
    "NO_ANSWER_TEXT",
    "TRUNCATED_NOTE",
    "card_reference",
    "has_visible_content",
    "indicator",
    "render_blocks",
    "render_final",
    "render_markdown",
    "safe_text",
    "post_content",
    "streaming_card",
    "text_size",
]

#: The ``element_id`` of the answer's markdown element (letters/digits/_, ≤ 20 chars; §9).
ANSWER_ELEMENT = "answer"
#: Largest :func:`text_size` of one card's text: 30 KB per card minus room for the card JSON.
CARD_TEXT_BUDGET = 24_000
NO_ANSWER_TEXT = "The model returned no answer."
TRUNCATED_NOTE = "✂️ The answer was cut off at the model's output limit."
#: Shown on a running card whose text is over the budget: the rest comes as more messages.
CONTINUED_NOTE = "_(continued in the next message…)_"
TOOL_PREVIEW_CHARS = 100

_INDICATORS = {
    TurnPhase.QUEUED: "⏳ Thinking…",
    TurnPhase.REASONING: "⏳ Thinking…",
    TurnPhase.ACTING: "🔧 Running tools…",
    TurnPhase.RESPONDING: "✍️ …",
    TurnPhase.COMPACTING: "🗜️ Compacting…",
    TurnPhase.FINALIZING: "…",
}
_AT_TAG = re.compile(r"<(\s*at\b)", re.IGNORECASE)
# print_* values per client platform ("default" applies to all); honoured from client 7.23 (§9).
_STREAMING_CONFIG = {
    "print_frequency_ms": {"default": 50},
    "print_step": {"default": 2},
    "print_strategy": "fast",
}


def text_size(text: str) -> int:
    """The size that counts against a card: UTF-8 bytes of ``json.dumps(text, ensure_ascii=False)``.

    Escapes count (a newline is 2 bytes, a quote 2). Lone surrogates are measured as 3 bytes
    each (``surrogatepass``) instead of raising.
    """
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def safe_text(text: str, *, empty: str = NO_ANSWER_TEXT) -> str:
    """``text`` fit for a card element or a message: surrogates repaired (U+FFFD), NUL replaced,
    ``<at`` tags neutralised (a zero-width space after ``<``: text that quotes a user, a title or
    the model can never mention people, ``<at user_id="all">`` least of all), and ``empty`` when
    nothing visible is left.
    """
    text = scrub_text(text)
    if "<" in text:
        text = _AT_TAG.sub("<\u200b\\1", text)
    return text if text.strip() else empty


def indicator(phase: TurnPhase | str) -> str:
    """The working line of a running card for ``phase`` (e.g. ``"🔧 Running tools…"``)."""
    try:
        return _INDICATORS[TurnPhase(phase)]
    except ValueError:
        return "…"


def has_visible_content(snapshot: TurnSnapshot) -> bool:
    """True once the turn shows something: non-blank assistant text or any tool block."""
    return any(
        block.get("type") == TOOL or (block.get("type") == ASSISTANT and str(block.get("text", "")).strip())
        for block in snapshot.blocks
    )


def render_blocks(blocks: Iterable[dict[str, Any]]) -> str:
    """The blocks as Markdown, in order; "" when nothing is visible.

    Assistant text as written (outer blank lines trimmed), separated by a blank line; a run of
    tool blocks as consecutive lines ``"🔧 `name` ✓ — preview"`` (``⏳`` while running, ``✗
    failed`` on failure); reasoning and unknown blocks are skipped.
    """
    chunks: list[str] = []
    tools: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == TOOL:
            tools.append(_tool_line(block))
            continue
        if kind != ASSISTANT:
            continue  # reasoning never reaches a Feishu chat (seed 003 §11)
        text = str(block.get("text", "")).lstrip("\n").rstrip()
        if not text:
            continue
        if tools:
            chunks.append("\n".join(tools))
            tools = []
        chunks.append(text)
    if tools:
        chunks.append("\n".join(tools))
    return "\n\n".join(chunks)


def _tool_line(block: dict[str, Any]) -> str:
    name = str(block.get("name") or "tool").replace("`", "'").replace("\n", " ")
    status = block.get("status")
    if status == ToolStatus.RUNNING:
        line = f"⏳ `{name}`"
    elif status == ToolStatus.FAILED:
        line = f"🔧 `{name}` ✗ failed"
    else:
        line = f"🔧 `{name}` ✓"
    preview = block.get("preview")
    if isinstance(preview, str) and preview.strip():
        preview = " ".join(preview.split())
        if len(preview) > TOOL_PREVIEW_CHARS:
            preview = preview[: TOOL_PREVIEW_CHARS - 1] + "…"
        line += f" — {preview}"
    return line


def render_markdown(snapshot: TurnSnapshot, budget: int = CARD_TEXT_BUDGET) -> str:
    """The running card's text: the blocks, then the phase's indicator line (never empty).

    When the blocks are larger than ``budget`` (:func:`text_size`), the card shows their first
    part (cut by :func:`~delivery.platforms.feishu.split.split_markdown`), then
    :data:`CONTINUED_NOTE`, then the indicator; the result stays within ``budget``.
    """
    line = indicator(snapshot.phase)
    body = safe_text(render_blocks(snapshot.blocks), empty="")
    if not body:
        return line
    text = f"{body}\n\n{line}"
    if text_size(text) <= budget:
        return text
    tail = f"\n\n{CONTINUED_NOTE}\n\n{line}"
    parts = split_markdown(body, max(budget - text_size(tail), 1), text_size)
    return parts[0] + tail


def render_final(snapshot: TurnSnapshot) -> str:
    """The terminal text (any size; the sink splits it): blocks, no indicator, plus the ending.

    - completed without answer text: the blocks (tool lines) and :data:`NO_ANSWER_TEXT`;
    - completed and ``truncated``: the blocks and :data:`TRUNCATED_NOTE`;
    - failed: the blocks and ``"⚠️ This answer failed: <error>"``;
    - cancelled: the blocks and ``"⏹ Stopped (<reason>)"`` (``"⏹ Stopped."`` without a reason
      other than "stopped").

    A running snapshot renders like a completed one. Never empty.
    """
    body = render_blocks(snapshot.blocks)
    notes: list[str] = []
    error = (snapshot.error or "").strip()
    if snapshot.status is TurnStatus.FAILED:
        notes.append(f"⚠️ This answer failed: {error}" if error else "⚠️ This answer failed.")
    elif snapshot.status is TurnStatus.CANCELLED:
        reason = "" if error.lower().rstrip(".") in ("", "stopped", "cancelled") else error
        notes.append(f"⏹ Stopped ({reason})" if reason else "⏹ Stopped.")
    else:
        if not snapshot.answer_text().strip():
            notes.append(NO_ANSWER_TEXT)
        if snapshot.to_dict().get("truncated"):
            notes.append(TRUNCATED_NOTE)
    return safe_text("\n\n".join(chunk for chunk in (body, *notes) if chunk))


def streaming_card(text: str) -> dict[str, Any]:
    """The CardKit entity of a running answer (card JSON 2.0, streaming on; FEISHU.md §9).

    ``{"schema": "2.0", "config": {"streaming_mode": true, "update_multi": true,
    "streaming_config": {...}}, "body": {"elements": [{"tag": "markdown", "element_id":
    "answer", "content": text}]}}``. ``text`` must already be safe (:func:`safe_text`).
    """
    return {
        "schema": "2.0",
        "config": {"streaming_mode": True, "update_multi": True, "streaming_config": _STREAMING_CONFIG},
        "body": {"elements": [{"tag": "markdown", "element_id": ANSWER_ELEMENT, "content": text}]},
    }


def post_content(text: str) -> dict[str, Any]:
    """A ``post`` message's content for a finished text: one ``md`` paragraph (send-only; it
    renders Markdown, FEISHU.md §7). What an answer sends as a message of its own — not a card,
    so it does not depend on the card machinery that may just have failed."""
    return {"zh_cn": {"title": "", "content": [[{"tag": "md", "text": text}]]}}


def card_reference(card_id: str) -> dict[str, Any]:
    """The ``interactive`` content that sends a CardKit entity (FEISHU.md §9 step 2)."""
    return {"type": "card", "data": {"card_id": card_id}}
