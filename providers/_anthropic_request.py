"""Anthropic Messages request mapping (pure): a neutral request → the JSON body.

Request (``POST {base}/v1/messages``)::

    {"model", "max_tokens", "stream": true, "system"?: str,
     "messages": [{"role": "user" | "assistant", "content": [block, ...]}],   # roles alternate
     "tools"?: [{"name", "description", "input_schema"}], "temperature"?, "thinking"?}

Neutral tool results (role ``tool``) become ``tool_result`` blocks of a user turn; consecutive
turns of one role are merged. An assistant message's blocks go out in its content order (the
stored layout: interleaved thinking stays interleaved). Thinking blocks are replayed (text +
signature, redacted data) only for assistant messages whose ``provider_state`` comes from this
provider at this endpoint (``replays_to``; seed 003 §6.2). A call whose argument text was not a
JSON object goes back with ``input: {}`` (the API takes objects only).
"""

from __future__ import annotations

from typing import Any

from providers.blocks import (
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    sendable_tool_name,
)
from providers.messages import Message
from providers.replay_identity import replays_to
from providers.types import ProviderRequest

DEFAULT_MAX_TOKENS = 4096


def build_messages_request(
    request: ProviderRequest,
    *,
    model: str,
    max_tokens: int | None = None,
    provider_name: str = "anthropic",
    endpoint: str | None = None,
    thinking_budget: int | None = None,
) -> dict[str, Any]:
    """The JSON body for ``request`` (see the module docstring)."""
    system = "\n\n".join(m.text for m in request.messages if m.role == "system" and m.text)
    turns: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, provider_name, endpoint)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens or DEFAULT_MAX_TOKENS,
        "messages": turns,
        "stream": True,
    }
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    # With extended thinking Anthropic accepts only the default temperature (1): never send another.
    if request.temperature is not None and not thinking_budget:
        body["temperature"] = request.temperature
    if thinking_budget:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
    return body


def _blocks(message: Message, provider_name: str, endpoint: str | None) -> list[dict[str, Any]]:
    replay = replays_to(message.provider_state, provider_name, endpoint)
    out: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            if block.text.strip():  # SC-25: the API rejects empty text blocks
                out.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingBlock):
            if replay and block.signature:
                out.append({"type": "thinking", "thinking": block.text, "signature": block.signature})
        elif isinstance(block, RedactedThinkingBlock):
            if replay:
                out.append({"type": "redacted_thinking", "data": block.data})
        elif isinstance(block, ToolUseBlock):
            # A malformed name kept in history would get the request refused (blocks.sendable_tool_name).
            name = sendable_tool_name(block.name)
            out.append({"type": "tool_use", "id": block.id, "name": name, "input": block.arguments})
        elif isinstance(block, ToolResultBlock):
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": block.tool_call_id,
                "content": block.content,
            }
            if block.is_error:
                result["is_error"] = True
            out.append(result)
        elif isinstance(block, ImageBlock):
            source = {"type": "base64", "media_type": block.mime_type, "data": block.data}
            out.append({"type": "image", "source": source})
    return out
