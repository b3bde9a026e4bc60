"""A turn's results as history rows (seed 003 §15, §14.1).

Pure helpers of the turn committer: no I/O. ``turn_rows`` shapes what ``storage.commit_turn``
writes; ``complete_tool_chains`` keeps a cancelled turn's tool chain valid.
"""

from __future__ import annotations

from conversations.agent.loop import TurnMessage
from conversations.context.history import reasoning_of
from conversations.models import Message
from providers.blocks import ToolUseBlock
from providers.messages import Message as ProviderMessage

CANCELLED_TOOL_RESULT = "Error: the turn was stopped before this tool call returned a result."


def _tool_call_row(call: ToolUseBlock) -> dict:
    """A ``tool_calls`` column item; ``raw_arguments`` only for arguments that were not a JSON
    object (server only: ``storage.message_to_protocol`` leaves it out)."""
    row = {"id": call.id, "name": call.name, "arguments": call.arguments}
    if call.raw_arguments is not None:
        row["raw_arguments"] = call.raw_arguments
    return row


def turn_rows(
    messages: list[TurnMessage], turn_id: str, reply_message_id: str, status: str, *, truncated: bool = False
) -> list[dict]:
    """Message field dicts for ``storage.commit_turn``; the last assistant row gets the reply id,
    ``status`` and ``truncated`` (its response stopped at the output limit), the others
    ``completed`` and not truncated."""
    rows: list[dict] = []
    last_assistant = max((i for i, m in enumerate(messages) if m.message.role == "assistant"), default=None)
    for index, item in enumerate(messages):
        msg = item.message
        if msg.role == "assistant":
            row = {
                "role": Message.Role.ASSISTANT,
                "content": msg.text,
                "reasoning_content": reasoning_of(msg),
                "provider_state": msg.provider_state,
                "tool_calls": [_tool_call_row(c) for c in msg.tool_calls],
                "completion_status": status
                if index == last_assistant
                else Message.CompletionStatus.COMPLETED,
            }
            row["truncated"] = truncated and index == last_assistant
            if index == last_assistant:
                row["id"] = reply_message_id
        else:
            block = msg.content[0]
            row = {
                "role": Message.Role.TOOL,
                "content": block.content,
                "tool_call_id": block.tool_call_id,
                "tool_name": block.tool_name,
                "is_error": block.is_error,
            }
        row["turn_id"] = turn_id
        row["iteration"] = item.iteration
        rows.append(row)
    return rows


def complete_tool_chains(messages: list[TurnMessage]) -> list[TurnMessage]:
    """``messages`` with every tool call followed by its result, an error result where none came.

    A turn cancelled while its tools ran must still commit a valid chain: providers reject a
    history where an assistant tool call has no result (seed 003 §14.1).
    """
    results = {m.message.content[0].tool_call_id: m for m in messages if m.message.role == "tool"}
    out: list[TurnMessage] = []
    for item in messages:
        if item.message.role == "tool":
            continue
        out.append(item)
        for call in item.message.tool_calls if item.message.role == "assistant" else []:
            missing = TurnMessage(
                item.iteration,
                ProviderMessage.tool_result(
                    call.id, CANCELLED_TOOL_RESULT, is_error=True, tool_name=call.name
                ),
            )
            out.append(results.get(call.id) or missing)
    return out
