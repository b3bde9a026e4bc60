"""OpenAI Chat Completions request mapping (pure): a neutral request → the JSON body.

Request (``POST {base_url}/chat/completions``)::

    {"model", "stream": true, "stream_options": {"include_usage": true},
     "messages": [{"role": "system", "content": str},            # exactly one, first, if any
                  {"role": "user", "content": str | [{"type": "text"|"image_url", …}]},
                  {"role": "assistant", "content": str | null, "tool_calls": [{"id", "type": "function",
                                         "function": {"name", "arguments": str}}], "reasoning_content"?},
                  {"role": "tool", "tool_call_id": str, "content": str}],
     "tools": [{"type": "function", "function": {"name", "description", "parameters"}}],
     "max_tokens"?, "temperature"?}
"""

from __future__ import annotations

import json
from typing import Any

from providers.blocks import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock, sendable_tool_name
from providers.messages import Message
from providers.replay_identity import replays_to
from providers.types import ProviderRequest


def build_chat_request(
    request: ProviderRequest,
    *,
    model: str,
    max_tokens: int | None = None,
    provider_name: str = "openai",
    endpoint: str | None = None,
) -> dict[str, Any]:
    """The JSON body for ``request`` (see the module docstring).

    System messages are merged (blank line between) into one system message sent first.
    ``reasoning_content`` is replayed only for assistant messages with tool calls whose
    ``provider_state`` comes from this provider at this endpoint (``replays_to``) and says it
    streamed ``reasoning_content`` (DeepSeek thinking mode wants it back within a tool loop).
    A call whose arguments were not a JSON object is sent with the text the model sent
    (``raw_arguments``), so the model sees its own mistake next to the error result.
    """
    system = "\n\n".join(m.text for m in request.messages if m.role == "system" and m.text)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in request.messages:
        if message.role == "system":
            continue
        results = [b for b in message.content if isinstance(b, ToolResultBlock)]
        messages.extend(
            {"role": "tool", "tool_call_id": r.tool_call_id, "content": r.content} for r in results
        )
        if message.role == "user":
            content = _user_content(message)
            if content or not results:
                messages.append({"role": "user", "content": content})
        elif message.role == "assistant":
            messages.append(_assistant(message, provider_name, endpoint))
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in request.tools
        ]
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    return body


def _user_content(message: Message) -> str | list[dict[str, Any]]:
    if not any(isinstance(b, ImageBlock) for b in message.content):
        return message.text
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock) and block.text:
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            url = f"data:{block.mime_type};base64,{block.data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _arguments(call: ToolUseBlock) -> str:
    if call.raw_arguments is not None:
        return call.raw_arguments
    return json.dumps(call.arguments, ensure_ascii=False)


def _assistant(message: Message, provider_name: str, endpoint: str | None) -> dict[str, Any]:
    calls = message.tool_calls
    out: dict[str, Any] = {"role": "assistant", "content": message.text or (None if calls else "")}
    if calls:
        out["tool_calls"] = [
            # A name outside OpenAI's pattern (kept as the model wrote it in history) would get the
            # whole request refused with HTTP 400: it is sent as ``unnamed_tool``.
            {
                "id": c.id,
                "type": "function",
                "function": {"name": sendable_tool_name(c.name), "arguments": _arguments(c)},
            }
            for c in calls
        ]
        state = message.provider_state
        if (
            replays_to(state, provider_name, endpoint)
            and state.get("reasoning_field") == "reasoning_content"  # type: ignore[union-attr]
            and message.reasoning
        ):
            out["reasoning_content"] = message.reasoning
    return out
