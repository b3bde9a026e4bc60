"""Context compaction, the pure part: where to cut, what to ask, what to keep (seed 002 Task 6).

A dialog's ``summary`` stands for its history rows with ``seq <= summary_seq``; compacting moves
``summary_seq`` forward (the rows stay in the database, only the model stops seeing them
verbatim). Here: how many rows stay verbatim (:func:`rows_to_keep`), the boundary that never
splits a tool call from its results (:func:`choose_boundary`), the summary request and its fit to
the window (:func:`build_summary_request`, :func:`fit_summary_request`), the usable summary in an
answer (:func:`clean_summary`) and when automatic compaction runs (:func:`should_compact`). Used
by ``/compact`` (``compaction_service``) and the turn input builder; the request-only shortening is
``pruning``. Rules: ``context/README.md``. Token figures are estimates (``tokens``). Pure: no
Django, no I/O.
"""

from __future__ import annotations

import json

from conversations.context.history import row_to_message
from conversations.context.tokens import (
    REQUEST_OVERHEAD,
    estimate_message,
    estimate_request,
    estimate_text,
)
from conversations.titles.rules import strip_reasoning
from providers.messages import Message
from providers.types import ProviderRequest

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
#: Automatic compaction stops after this many consecutive failures (seed 002 §6d, DESIGN §6).
MAX_CONSECUTIVE_FAILURES = 3
#: Per-row character limits tried in turn by :func:`fit_summary_request`: (text, tool result).
SUMMARY_ROW_LIMITS = ((2000, 500), (1000, 250), (500, 120), (200, 60))
#: A summary is asked to stay within this many tokens at most (:func:`summary_token_cap`).
SUMMARY_MAX_TOKENS = 4000
#: A summary longer than this (a model that ignored its ``max_tokens``) is cut by :func:`clean_summary`.
MAX_SUMMARY_CHARS = 24000


def rows_to_keep(rows: list[dict], keep_messages: int, target: int, *, fixed: int = REQUEST_OVERHEAD) -> int:
    """How many of the newest ``rows`` a summary keeps verbatim: at most ``keep_messages``, fewer
    when they do not fit (README ``PICOBOT_COMPACT_KEEP_MESSAGES``: "kept verbatim *at most*").

    The kept rows may take half of what the request budget leaves after its fixed parts, so the
    summary and the next turn's own messages have room too. The result is the ``keep`` of
    :func:`choose_boundary`, which may keep more (it cuts only before a user row, never between a
    tool call and its results, and always keeps the newest user row).

    Args:
        rows: the history rows after the current summary, oldest first (history form).
        keep_messages: the configured most (``PICOBOT.compact_keep_messages``), rows.
        target: estimated tokens a turn's request may take (the compaction share of the window).
        fixed: estimated tokens of the request's fixed parts (overhead, tool definitions); the
            manual ``/compact`` does not know the worker's tools and passes the overhead only.

    Returns:
        A row count, 0 … ``min(keep_messages, len(rows))`` (0 when even the newest row alone
        does not fit). Pure; estimates only (``conversations.context.tokens``).
    """
    budget = (target - fixed) // 2
    kept = used = 0
    for row in reversed(rows):
        if kept >= keep_messages:
            break
        message = row_to_message(row)
        used += estimate_message(message) if message is not None else 0
        if used > budget:
            break
        kept += 1
    return kept


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
    previous_summary: str,
    rows: list[dict],
    *,
    max_row_chars: int = 2000,
    max_tool_chars: int = 500,
    omitted: int = 0,
    max_tokens: int | None = None,
) -> ProviderRequest:
    """The request that asks the model for the updated summary.

    Args:
        previous_summary: the dialog's current summary (``""`` when none); merged into the new one.
        rows: the rows to fold in, oldest first (history form). Only ``content`` (think spans
            stripped), tool names, tool-call arguments and tool results are read — never
            ``reasoning`` or ``provider_state`` (DESIGN §6). Attached images are mentioned, not sent.
        max_row_chars: a user or assistant text longer than this is cut (with ``…``).
        max_tool_chars: the same for a tool result (results are included briefly).
        omitted: how many rows before ``rows`` were left out (they did not fit the model); the
            material says so, so the summary does not pretend to be complete.
        max_tokens: the summary's length limit (:func:`summary_token_cap`): the request's output
            cap, and said in the material; None leaves both to the provider.

    Returns:
        A request of a system message (the instructions) and one user message (the material).
    """
    parts: list[str] = []
    if previous_summary.strip():
        parts.append(f"Previous summary:\n{previous_summary.strip()}")
    lines = [line for row in rows for line in _row_lines(row, max_row_chars, max_tool_chars)]
    if omitted:
        lines.insert(0, f"({omitted} earlier message(s) left out: too long to summarise at once)")
    parts.append("Messages to add:\n\n" + ("\n\n".join(lines) if lines else "(none)"))
    parts.append(
        "Write the updated summary."
        if max_tokens is None
        else f"Write the updated summary, at most about {max_tokens:,} tokens long."
    )
    return ProviderRequest(
        messages=[Message.system(SUMMARY_INSTRUCTIONS), Message.user("\n\n".join(parts))],
        max_tokens=max_tokens,
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


def clean_summary(text: str, *, max_chars: int = MAX_SUMMARY_CHARS) -> str | None:
    """The summary in a model's answer: think spans stripped, whitespace trimmed, at most
    ``max_chars`` characters (a longer one is cut at a word boundary and ends with ``…``).

    Returns None for an empty or reasoning-only answer and for one whose think span never
    closes (a cut-off answer must not replace the history it summarises).
    """
    summary = strip_reasoning(text or "")
    if summary is None or len(summary) <= max_chars:
        return summary
    cut = summary[: max(1, max_chars - 1)]
    space = cut.rfind(" ", max_chars // 2)
    return (cut[:space] if space > 0 else cut).rstrip() + "…"


def summary_token_cap(budget: int) -> int:
    """Tokens a summary written for a request budget of ``budget`` tokens may take.

    A quarter of the budget (the summary has to leave room for the rows kept verbatim and the
    current turn), at most :data:`SUMMARY_MAX_TOKENS`, at least 64.
    """
    return max(64, min(SUMMARY_MAX_TOKENS, int(budget) // 4))


def summary_too_large(summary: str, budget: int) -> bool:
    """Whether ``summary`` takes more than half of a ``budget``-token request: such a summary
    would crowd out the conversation it stands for, and is not used (nor stored)."""
    return estimate_text(summary) > max(1, int(budget)) // 2


def should_compact(estimate: int, window: int, share: float, *, failures: int = 0) -> bool:
    """Whether a request of ``estimate`` tokens should be compacted first (seed 002 §6d).

    Args:
        estimate: the request's estimated tokens (``tokens.estimate_request``).
        window: the model's context window, tokens.
        share: the fraction of ``window`` (0 < share ≤ 1) a request may use before compaction.
        failures: the dialog's consecutive automatic compaction failures; at
            :data:`MAX_CONSECUTIVE_FAILURES` automatic compaction is off (DESIGN §6).

    Returns:
        True when ``estimate`` passes ``share * window`` and compaction is not switched off.
    """
    return failures < MAX_CONSECUTIVE_FAILURES and estimate > window * share


def fit_summary_request(
    previous_summary: str, rows: list[dict], budget: int, *, max_tokens: int | None = None
) -> tuple[ProviderRequest, int]:
    """The summary request of :func:`build_summary_request`, made to fit ``budget`` tokens.

    The per-row limits of :data:`SUMMARY_ROW_LIMITS` are tried in turn; when even the smallest
    is over ``budget``, the oldest rows are left out (the request says how many; the previous
    summary still carries what came before them). Keeps one request, hence one model call.
    ``max_tokens`` is the summary's length limit (:func:`build_summary_request`).

    Returns:
        ``(request, omitted_rows)``.
    """
    for max_row_chars, max_tool_chars in SUMMARY_ROW_LIMITS:
        request = build_summary_request(
            previous_summary,
            rows,
            max_row_chars=max_row_chars,
            max_tool_chars=max_tool_chars,
            max_tokens=max_tokens,
        )
        if estimate_request(request.messages) <= budget:
            return request, 0
    fixed = estimate_request(build_summary_request(previous_summary, [], omitted=len(rows)).messages)
    costs = [
        sum(estimate_text(line) + 1 for line in _row_lines(row, max_row_chars, max_tool_chars))
        for row in rows
    ]
    start = 0
    total = fixed + sum(costs)
    while start < len(rows) - 1 and total > budget:
        total -= costs[start]
        start += 1
    kept = rows[start:]
    request = build_summary_request(
        previous_summary,
        kept,
        max_row_chars=max_row_chars,
        max_tool_chars=max_tool_chars,
        omitted=start,
        max_tokens=max_tokens,
    )
    return request, start
