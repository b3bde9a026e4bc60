"""History rows → provider messages, and the request input of a turn (seed 000 §7.1–§8).

Pure: no Django. Rows are the dicts of ``storage.message_to_history_row``. The system prompt is
built per request and never stored; runtime context (time, channel, title) is appended inside the
last user message, never as an extra message (DESIGN §6).
"""

from __future__ import annotations

import logging
from collections import deque

from providers.blocks import ImageBlock, ThinkingBlock, ToolUseBlock
from providers.messages import RUNTIME_CONTEXT_MARKER, Message

log = logging.getLogger(__name__)

INTERRUPTED_RESULT = "Error: this tool call was interrupted before it returned a result."


def row_to_message(row: dict) -> Message | None:
    """One history row as a provider Message, or None for a row that carries nothing to send.

    An assistant row without answer text and without tool calls — reasoning alone, as a turn
    stopped while it reasoned keeps it (``agent/README.md`` "Cancel") — is None: neither vendor
    takes such a message back (OpenAI-compatible servers may refuse an empty ``content``,
    Anthropic an assistant turn whose only block is thinking it drops). The user rows around it
    then stay two user turns, which both accept (Anthropic's are merged).
    """
    role = row["role"]
    if role == "user":
        return Message.user(row.get("content") or "", images=_images(row))
    if role == "tool":
        return Message.tool_result(
            row.get("tool_call_id") or "",
            row.get("content") or "",
            is_error=bool(row.get("is_error")),
            tool_name=row.get("tool_name"),
        )
    calls = [
        ToolUseBlock(
            id=c["id"],
            name=c["name"],
            arguments=c.get("arguments") or {},
            raw_arguments=c["raw_arguments"] if isinstance(c.get("raw_arguments"), str) else None,
        )
        for c in row.get("tool_calls") or []
    ]
    state = row.get("provider_state")
    if state is not None and not isinstance(state, dict):
        # A corrupt provider_state means "no replay", never an unreadable history (seed 003 §15).
        log.warning("ignoring corrupt provider_state on message %s", row.get("id"))
        state = None
    message = Message.assistant(
        text=row.get("content") or "", reasoning=row.get("reasoning"), tool_calls=calls, provider_state=state
    )
    if not message.text.strip() and not message.tool_calls:
        return None
    return message


def _images(row: dict) -> list[ImageBlock]:
    return [
        ImageBlock(mime_type=m["mime_type"], data=m["data"])
        for m in row.get("media_refs") or []
        if isinstance(m, dict) and m.get("mime_type") and m.get("data")
    ]


def repair_tool_pairs(messages: list[Message]) -> list[Message]:
    """Make every assistant tool call have exactly one result right after it (DESIGN §5 rule).

    A call's result is the first unused tool result with its ``tool_call_id`` that comes after
    it — moved up when something (a user row of an imported or damaged dialog) separated them.
    Calls without a result get an "interrupted" error result; results no call claims are dropped.
    Matching is positional, so a provider that reuses ids across turns (``call_0`` every time)
    still pairs each call with its own result. Providers reject a history that breaks this, so a
    damaged dialog would otherwise fail every later request. O(n).
    """
    positions: dict[str, deque[int]] = {}
    for index, msg in enumerate(messages):
        if msg.role == "tool" and msg.content:
            positions.setdefault(msg.content[0].tool_call_id, deque()).append(index)
    used: set[int] = set()
    out: list[Message] = []
    for index, msg in enumerate(messages):
        if msg.role == "tool":
            if index not in used:
                log.warning("dropping a tool result that no earlier tool call claims")
            continue
        out.append(msg)
        if msg.role != "assistant":
            continue
        for call in msg.tool_calls:
            queue = positions.get(call.id)
            while queue and (queue[0] < index or queue[0] in used):
                queue.popleft()
            if queue:
                used.add(queue[0])
                out.append(messages[queue.popleft()])
            else:
                out.append(
                    Message.tool_result(call.id, INTERRUPTED_RESULT, is_error=True, tool_name=call.name)
                )
    return out


CLIENT_INSTRUCTIONS_HEADING = "\n\nInstructions from the client for this turn:\n"


def with_client_instructions(system_prompt: str, instructions: str) -> str:
    """``system_prompt`` followed by a turn's extra instructions (an OpenAI-compatible request's
    system messages, issue 18) under a heading; unchanged when ``instructions`` is blank. The
    deployment's own prompt comes first: the client adds to it, never replaces it."""
    if not instructions.strip():
        return system_prompt
    return system_prompt + CLIENT_INSTRUCTIONS_HEADING + instructions.strip()


def build_turn_input(
    system_prompt: str, rows: list[dict], *, runtime_context: str = "", summary: str = ""
) -> list[Message]:
    """The provider input of a turn: one system message first, then the repaired history.

    ``runtime_context`` is appended to the last user message's text for this request only.
    """
    system = system_prompt
    if summary:
        system += "\n\nSummary of the earlier conversation:\n" + summary
    messages = [m for m in (row_to_message(r) for r in rows) if m is not None]
    messages = repair_tool_pairs(messages)
    if runtime_context:
        for index in range(len(messages) - 1, -1, -1):
            if messages[index].role == "user":
                user = messages[index]
                images = [b for b in user.content if isinstance(b, ImageBlock)]
                text = f"{user.text}{RUNTIME_CONTEXT_MARKER}{runtime_context}]"
                messages[index] = Message.user(text, images=images)
                break
    return [Message.system(system), *messages]


def reasoning_of(message: Message) -> str | None:
    """The readable reasoning text of an assistant message, or None."""
    parts = [b.text for b in message.content if isinstance(b, ThinkingBlock) and b.text]
    return "".join(parts) or None
