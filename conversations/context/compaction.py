"""Context compaction, the pure part: where to cut, what to ask, what to keep (seed 002 Task 6).

A dialog's ``summary`` stands for its history rows with ``seq <= summary_seq``; a turn's input is
the system prompt + that summary + the rows after it (``history.build_turn_input``). Compacting
moves ``summary_seq`` forward: the rows stay in the database (``/compact``, seed 004 §7; history
paging is unchanged), only the model stops seeing them verbatim.

* :func:`rows_to_keep` — how many of the newest rows stay verbatim: at most
  ``COMPACT_KEEP_MESSAGES``, fewer when they would not fit the window (one rule for ``/compact``
  and automatic compaction).
* :func:`choose_boundary` — the new ``summary_seq``: keeps the newest rows verbatim and never
  splits an assistant tool call from its results (the rows after it start with a user row).
* :func:`build_summary_request` — the summarisation request over the previous summary and the
  rows to fold in; it carries visible text and tool activity, never reasoning (DESIGN §6).
* :func:`clean_summary` — the usable summary in the model's answer, or None.

Used by the manual ``/compact`` (``conversations.context.compaction_service``); automatic compaction
(``conversations.context.turn_input``) reuses the same four functions, plus:

* :func:`should_compact` — whether a request estimate passes the share of the context window
  that triggers compaction, unless :data:`MAX_CONSECUTIVE_FAILURES` failures stopped it (seed
  002 §6d, DESIGN §6).
* :func:`microcompact` — the request-only pass that replaces the content of old *successful*
  tool results with a short marker, never an error result (seed 002 §6c, FIX-F).
* :func:`drop_oldest_turns` — the last resort: leave the oldest whole turns out of a request so
  that it fits, never separating a tool call from its results.
* :func:`truncate_tool_results` — cut the largest tool results of a request to one level, each
  with a marker (successful ones only, unless told otherwise).
* :func:`fit_request` — the request of a later step of a turn (after tool calls) made to fit:
  older results pruned, the largest results cut, old turns left out, error results last.
* :func:`fit_summary_request` — a summary request that itself fits the model's window.
* :func:`summary_token_cap` — how long a summary may be (the request asks for it with
  ``max_tokens``; :func:`clean_summary` cuts a runaway answer at :data:`MAX_SUMMARY_CHARS`).

Token figures are estimates (``conversations.context.tokens``).

Pure module: no Django, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from conversations.context.history import row_to_message
from conversations.context.tokens import (
    REQUEST_OVERHEAD,
    estimate_block,
    estimate_message,
    estimate_messages,
    estimate_request,
    estimate_text,
)
from conversations.titles.rules import strip_reasoning
from providers.blocks import ToolResultBlock
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
#: The content an old successful tool result gets in a request (``{chars}``: its original length).
PRUNED_RESULT = "[older tool result pruned: {chars} chars]"
#: Automatic compaction stops after this many consecutive failures (seed 002 §6d, DESIGN §6).
MAX_CONSECUTIVE_FAILURES = 3
#: Per-row character limits tried in turn by :func:`fit_summary_request`: (text, tool result).
SUMMARY_ROW_LIMITS = ((2000, 500), (1000, 250), (500, 120), (200, 60))
#: A summary is asked to stay within this many tokens at most (:func:`summary_token_cap`).
SUMMARY_MAX_TOKENS = 4000
#: A summary longer than this (a model that ignored its ``max_tokens``) is cut by :func:`clean_summary`.
MAX_SUMMARY_CHARS = 24000
#: The end of a tool result that :func:`truncate_tool_results` cut (this request only).
TRUNCATED_RESULT = "\n[tool result cut to fit the context window: {kept} of {chars} chars kept]"
#: :func:`truncate_tool_results` keeps at least this many characters of a result it cuts.
MIN_TRUNCATED_CHARS = 200


def rows_to_keep(rows: list[dict], keep_messages: int, target: int, *, fixed: int = REQUEST_OVERHEAD) -> int:
    """How many of the newest ``rows`` a summary keeps verbatim: at most ``keep_messages``, fewer
    when they do not fit (README ``PICOBOT_COMPACT_KEEP_MESSAGES``: "kept verbatim *at most*").

    The kept rows may take half of what the request budget leaves after its fixed parts, so the
    summary and the next turn's own messages have room too. The result is the ``keep`` of
    :func:`choose_boundary`, which may keep more (it cuts only before a user row, never between a
    tool call and its results, and always keeps the newest user row).

    Args:
        rows: the history rows after the current summary, oldest first (history form).
        keep_messages: the configured most (``PICOBOT["COMPACT_KEEP_MESSAGES"]``), rows.
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
        "Write the updated summary." if max_tokens is None else
        f"Write the updated summary, at most about {max_tokens:,} tokens long."
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


# --- automatic compaction -------------------------------------------------------------------------


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


def microcompact(messages: Sequence[Message], keep_recent: int) -> tuple[list[Message], int]:
    """Prune the content of old successful tool results in a request (seed 002 §6c, FIX-F).

    Every tool result but the newest ``keep_recent`` (counted over all tool results, errors
    included, newest last) whose ``is_error`` is False gets :data:`PRUNED_RESULT` as its content,
    when that is shorter. Error results are never touched: they tell the model why something
    failed. Call ids, names and the message order stay, so tool pairs stay valid. Request-only:
    the input is not changed (messages are immutable; changed ones are new objects), and nothing
    here is ever stored.

    Returns:
        ``(messages, freed_tokens)``: a new list, and the estimated tokens saved (≥ 0).
    """
    positions = [
        (index, block_index)
        for index, message in enumerate(messages)
        for block_index, block in enumerate(message.content)
        if isinstance(block, ToolResultBlock)
    ]
    prunable = positions[: max(0, len(positions) - max(keep_recent, 0))]
    out = list(messages)
    freed = 0
    for index, block_index in prunable:
        message = out[index]
        block = message.content[block_index]
        assert isinstance(block, ToolResultBlock)
        if block.is_error:
            continue
        marker = PRUNED_RESULT.format(chars=len(block.content))
        if len(marker) >= len(block.content):
            continue
        pruned = ToolResultBlock(block.tool_call_id, marker, False, block.tool_name)
        freed += estimate_block(block) - estimate_block(pruned)
        content = list(message.content)
        content[block_index] = pruned
        out[index] = Message(message.role, content, message.provider_state)
    return out, max(freed, 0)


def drop_oldest_turns(messages: Sequence[Message], budget: int) -> tuple[list[Message], int]:
    """Leave the oldest turns out of a request until its messages fit ``budget`` tokens.

    The leading system message(s) stay; the rest is cut only right before a ``user`` message,
    so a tool call never loses its results and the request still starts the way providers
    require. The last user message (the one this turn answers, with the runtime context) and
    everything after it always stay, even when that alone is over ``budget``.

    Returns:
        ``(messages, dropped)``: the kept messages and how many were left out (0 when the input
        already fits or cannot be cut).
    """
    head = 0
    while head < len(messages) and messages[head].role == "system":
        head += 1
    body = list(messages[head:])
    cuts = [i for i, message in enumerate(body) if message.role == "user"]
    if not cuts:
        return list(messages), 0
    fixed = estimate_messages(messages[:head])
    suffix = [0] * (len(body) + 1)
    for i in range(len(body) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + estimate_message(body[i])
    cut = cuts[-1]
    for candidate in cuts:
        if fixed + suffix[candidate] <= budget:
            cut = candidate
            break
    return [*messages[:head], *body[cut:]], cut


def truncate_tool_results(
    messages: Sequence[Message], budget: int, *, include_errors: bool = False
) -> tuple[list[Message], int]:
    """Cut the largest tool results of a request to one level until its messages fit ``budget``.

    Water-filling: the results over a common level (in estimated tokens) are cut to it, each
    keeping its beginning and ending with :data:`TRUNCATED_RESULT`; smaller results stay whole,
    and no result is cut below :data:`MIN_TRUNCATED_CHARS`. Error results are left alone unless
    ``include_errors`` (they tell the model why something failed). Request-only, like
    :func:`microcompact`: new message objects, ids and order unchanged, nothing stored.

    Returns:
        ``(messages, cut)``: the new list and how many results were cut (0: it already fitted,
        or nothing could be cut). The result may still be over ``budget``.
    """
    out = list(messages)
    cut_total = 0
    for _ in range(3):  # the level is an estimate: a second pass takes the rounding error
        excess = estimate_messages(out) - budget
        if excess <= 0:
            break
        candidates = [
            (index, block_index, block, estimate_text(block.content))
            for index, message in enumerate(out)
            for block_index, block in enumerate(message.content)
            if isinstance(block, ToolResultBlock)
            and (include_errors or not block.is_error)
            and len(block.content) > MIN_TRUNCATED_CHARS + len(TRUNCATED_RESULT)
        ]
        if not candidates:
            break
        marker = estimate_text(TRUNCATED_RESULT.format(kept=10**6, chars=10**7))
        need = excess + marker * len(candidates)
        floor = estimate_text("x" * MIN_TRUNCATED_CHARS)
        low, high = floor, max(tokens for *_, tokens in candidates)
        if sum(max(0, tokens - low) for *_, tokens in candidates) < need:
            level = low  # even the floor does not fit: cut everything to it (the caller goes on)
        else:  # the highest level that frees enough
            while low < high:
                middle = (low + high + 1) // 2
                if sum(max(0, tokens - middle) for *_, tokens in candidates) >= need:
                    low = middle
                else:
                    high = middle - 1
            level = low
        changed = 0
        for index, block_index, block, tokens in candidates:
            if tokens <= level:
                continue
            keep = max(MIN_TRUNCATED_CHARS, len(block.content) * level // max(tokens, 1))
            if keep >= len(block.content):
                continue
            content = block.content[:keep] + TRUNCATED_RESULT.format(kept=keep, chars=len(block.content))
            message = out[index]
            blocks = list(message.content)
            blocks[block_index] = ToolResultBlock(block.tool_call_id, content, block.is_error, block.tool_name)
            out[index] = Message(message.role, blocks, message.provider_state)
            changed += 1
        if not changed:
            break
        cut_total += changed
    return out, cut_total


def fit_request(messages: Sequence[Message], budget: int, *, keep_recent: int = 0) -> list[Message]:
    """A later request of a turn (after tool calls) made to fit ``budget`` tokens, request-only.

    In order, until the messages fit:

    1. :func:`microcompact` of the older tool results: every result but those of the newest tool
       batch (the model has not read them yet) and the newest ``keep_recent`` is pruned to its
       marker — successful ones only;
    2. :func:`truncate_tool_results`: the largest successful results are cut to one level;
    3. :func:`drop_oldest_turns`: the oldest whole turns before this turn's user message are left
       out;
    4. only then, unavoidable: error results are cut too.

    The system prompt, the current user message (with the runtime context) and the turn's tool
    chains stay; nothing stored changes (messages are immutable; changed ones are new objects).
    The result may still be over ``budget`` (the provider then says so).
    """
    out = list(messages)
    if estimate_messages(out) <= budget:
        return out
    newest_batch = 0
    for message in reversed(out):
        if message.role != "tool":
            break
        newest_batch += sum(1 for block in message.content if isinstance(block, ToolResultBlock))
    out, _ = microcompact(out, max(keep_recent, newest_batch))
    if estimate_messages(out) <= budget:
        return out
    out, _ = truncate_tool_results(out, budget)
    if estimate_messages(out) <= budget:
        return out
    out, _ = drop_oldest_turns(out, budget)
    if estimate_messages(out) <= budget:
        return out
    out, _ = truncate_tool_results(out, budget, include_errors=True)
    return out


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
            previous_summary, rows, max_row_chars=max_row_chars, max_tool_chars=max_tool_chars,
            max_tokens=max_tokens,
        )
        if estimate_request(request.messages) <= budget:
            return request, 0
    fixed = estimate_request(build_summary_request(previous_summary, [], omitted=len(rows)).messages)
    costs = [
        sum(estimate_text(line) + 1 for line in _row_lines(row, max_row_chars, max_tool_chars)) for row in rows
    ]
    start = 0
    total = fixed + sum(costs)
    while start < len(rows) - 1 and total > budget:
        total -= costs[start]
        start += 1
    kept = rows[start:]
    request = build_summary_request(
        previous_summary, kept, max_row_chars=max_row_chars, max_tool_chars=max_tool_chars, omitted=start,
        max_tokens=max_tokens,
    )
    return request, start
