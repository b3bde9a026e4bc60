"""Context compaction, the pure part: where to cut, what to ask, what to keep (seed 002 Task 6).

A dialog's ``summary`` stands for its history rows with ``seq <= summary_seq``; a turn's input is
the system prompt + that summary + the rows after it (``history.build_turn_input``). Compacting
moves ``summary_seq`` forward: the rows stay in the database (``/compact``, seed 004 §7; history
paging is unchanged), only the model stops seeing them verbatim.

* :func:`choose_boundary` — the new ``summary_seq``: keeps the newest rows verbatim and never
  splits an assistant tool call from its results (the rows after it start with a user row).
* :func:`build_summary_request` — the summarisation request over the previous summary and the
  rows to fold in; it carries visible text and tool activity, never reasoning (DESIGN §6).
* :func:`clean_summary` — the usable summary in the model's answer, or None.

Used by the manual ``/compact`` (``conversations.compaction_service``); automatic compaction
reuses the same three functions.

Pure module: no Django, no I/O.
"""

from __future__ import annotations

import json

from conversations.titles import strip_reasoning
from providers.base import ProviderRequest
from providers.messages import Message

SUMMARY_INSTRUCTIONS = (
    "You compress a conversation between a user and an AI assistant so that the assistant can "
    "continue it without the original messages. Write a concise summary, in the language of the "
    "conversation, that keeps: facts and data the user gave or the assistant found; decisions and "
    "conclusions; open tasks and unanswered questions; the user's preferences and instructions; and, "
    "briefly, what tools were used for and what they returned. Leave out pleasantries. Use plain "
    "text or short bullet points, with no preamble. When a previous summary is given, merge it in: "
    "your summary replaces it."
)
TOOL_ARGUMENT_CHARS = 300


def choose_boundary(rows: list[dict], keep: int) -> int | None:
    """The ``seq`` up to which ``rows`` should be summarised, or None when nothing can be.

    Args:
        rows: the history rows after the current summary, oldest first (dicts with ``seq`` and
            ``role``, as ``storage.message_to_history_row``).
        keep: how many of the newest rows must stay verbatim (a count of rows, not turns).

    Returns:
        The highest ``seq`` S such that at least ``keep`` rows have ``seq > S`` and the first of
        them is a ``user`` row, so no tool call is ever separated from its results and the
        remaining history starts the way providers require. The newest user row is therefore
        always kept, even with ``keep == 0``. None when no such S exists.
    """
    last = min(len(rows) - max(keep, 0), len(rows) - 1) - 1
    for index in range(last, -1, -1):
        if rows[index + 1]["role"] == "user":
            return rows[index]["seq"]
    return None


def build_summary_request(
    previous_summary: str, rows: list[dict], *, max_row_chars: int = 2000, max_tool_chars: int = 500
) -> ProviderRequest:
    """The request that asks the model for the updated summary.

    Args:
        previous_summary: the dialog's current summary (``""`` when none); merged into the new one.
        rows: the rows to fold in, oldest first (history form). Only ``content`` (think spans
            stripped), tool names, tool-call arguments and tool results are read — never
            ``reasoning`` or ``provider_state`` (DESIGN §6). Attached images are mentioned, not sent.
        max_row_chars: a user or assistant text longer than this is cut (with ``…``).
        max_tool_chars: the same for a tool result (results are included briefly).

    Returns:
        A request of a system message (the instructions) and one user message (the material).
    """
    parts: list[str] = []
    if previous_summary.strip():
        parts.append(f"Previous summary:\n{previous_summary.strip()}")
    lines = [line for row in rows for line in _row_lines(row, max_row_chars, max_tool_chars)]
    parts.append("Messages to add:\n\n" + ("\n\n".join(lines) if lines else "(none)"))
    parts.append("Write the updated summary.")
    return ProviderRequest(
        messages=[Message.system(SUMMARY_INSTRUCTIONS), Message.user("\n\n".join(parts))]
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _row_lines(row: dict, max_row_chars: int, max_tool_chars: int) -> list[str]:
    role = row.get("role")
    content = row.get("content") or ""
    if role == "user":
        images = len(row.get("media_refs") or [])
        note = f" [{images} image(s) attached]" if images else ""
        return [f"[user] {_cut(content.strip(), max_row_chars)}{note}"]
    if role == "tool":
        kind = "error" if row.get("is_error") else "result"
        return [f"[tool {row.get('tool_name') or '?'} {kind}] {_cut(content.strip(), max_tool_chars)}"]
    lines = []
    text = strip_reasoning(content, cut_unterminated=True)
    if text:
        lines.append(f"[assistant] {_cut(text, max_row_chars)}")
    for call in row.get("tool_calls") or []:
        arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False)
        lines.append(f"[assistant called {call.get('name')}] {_cut(arguments, TOOL_ARGUMENT_CHARS)}")
    return lines


def clean_summary(text: str) -> str | None:
    """The summary in a model's answer: think spans stripped, whitespace trimmed.

    Returns None for an empty or reasoning-only answer and for one whose think span never
    closes (a cut-off answer must not replace the history it summarises).
    """
    return strip_reasoning(text or "")
