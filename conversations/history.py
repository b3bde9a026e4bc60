"""History rows → provider messages, and the request input of a turn (seed 000 §7.1–§8).

Pure: no Django. Rows are the dicts of ``storage.message_to_history_row``. The system prompt is
built per request and never stored; runtime context (time, channel, title) is appended inside the
last user message, never as an extra message (DESIGN §6).
"""

from __future__ import annotations

import logging

from providers.messages import RUNTIME_CONTEXT_MARKER, ImageBlock, Message, ThinkingBlock, ToolUseBlock

log = logging.getLogger(__name__)

INTERRUPTED_RESULT = "Error: this tool call was interrupted before it returned a result."


def row_to_message(row: dict) -> Message | None:
    """One history row as a provider Message (None for a row that carries nothing)."""
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
    if not message.content:
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

    Missing results become "interrupted" error results; results without a matching call are
    dropped. Providers reject a history that breaks this, so a damaged dialog would otherwise fail
    every later request.
    """
    out: list[Message] = []
    i = 0
    while i < len(messages):
        msg = messages[i]
        if msg.role == "tool":
            log.warning("dropping orphaned tool result")
            i += 1
            continue
        out.append(msg)
        i += 1
        if msg.role != "assistant" or not msg.tool_calls:
            continue
        results: dict[str, Message] = {}
        while i < len(messages) and messages[i].role == "tool":
            result = messages[i]
            call_id = result.content[0].tool_call_id if result.content else ""
            results.setdefault(call_id, result)
            i += 1
        for call in msg.tool_calls:
            out.append(results.get(call.id) or Message.tool_result(call.id, INTERRUPTED_RESULT, is_error=True, tool_name=call.name))
    return out


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
