"""Request-only shortening of a turn's messages to fit the context window (seed 002 §6c, FIX-F).

Nothing here is stored: old successful tool results are pruned to a marker (:func:`microcompact`),
the largest results cut to one level (:func:`truncate_tool_results`), the oldest whole turns left
out of the request (:func:`drop_oldest_turns`), and a later request of a turn fitted with all three
(:func:`fit_request`). Error results are kept whole until nothing else is left to cut; a tool call
never loses its results. Messages are immutable: changed ones are new objects. Rules:
``context/README.md``. Token figures are estimates (``tokens``). Pure: no Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from conversations.context.tokens import estimate_block, estimate_message, estimate_messages, estimate_text
from providers.blocks import ToolResultBlock
from providers.messages import Message

#: The content an old successful tool result gets in a request (``{chars}``: its original length).
PRUNED_RESULT = "[older tool result pruned: {chars} chars]"
#: The end of a tool result that :func:`truncate_tool_results` cut (this request only).
TRUNCATED_RESULT = "\n[tool result cut to fit the context window: {kept} of {chars} chars kept]"
#: :func:`truncate_tool_results` keeps at least this many characters of a result it cuts.
MIN_TRUNCATED_CHARS = 200


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
            blocks[block_index] = ToolResultBlock(
                block.tool_call_id, content, block.is_error, block.tool_name
            )
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
