"""The content blocks of a neutral message and their dict form (seed 002).

Block ``type`` values in the dict form: ``text``, ``thinking``, ``redacted_thinking``,
``tool_use``, ``tool_result``, ``image``::

    {"type": "thinking", "text": "…", "signature": "…"}          # signature omitted when None
    {"type": "tool_use", "id": "call_1", "name": "current_time", "arguments": {},
     "raw_arguments": "…"}                                         # only when not a JSON object

A ``tool_use`` whose argument text was not a JSON object has ``arguments: {}`` and the text
itself in ``raw_arguments``. :func:`block_from_dict` raises ``ValueError`` naming the bad field.

Pure module: no Django, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The name a tool call is sent back with when the model's own name is one no provider accepts.
UNNAMED_TOOL = "unnamed_tool"
# OpenAI's function name rule (``^[a-zA-Z0-9_-]{1,64}$``: a request whose history holds another
# name is refused with HTTP 400); Anthropic's tool names follow the same rule.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def sendable_tool_name(name: str) -> str:
    """``name`` when providers accept it back in a request's history, else :data:`UNNAMED_TOOL`.

    A model may call a tool with an empty, blank or malformed name (``""``, ``" "``,
    ``functions.get_time``, 300 characters); such a call cannot run, and sent back as it is, every
    later request of the dialog would be refused. History keeps the model's name (the tool block
    shows it); the vendor request mappers send this instead. Pure; ``""`` and any name outside
    ``[A-Za-z0-9_-]{1,64}`` give the placeholder.
    """
    return name if _TOOL_NAME.fullmatch(name) else UNNAMED_TOOL


@dataclass(frozen=True, slots=True)
class TextBlock:
    """Visible text."""

    text: str


@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    """Readable reasoning; ``signature`` is the vendor's integrity token (Anthropic), if any."""

    text: str
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class RedactedThinkingBlock:
    """Encrypted reasoning (Anthropic ``redacted_thinking``): replayed verbatim, never shown."""

    data: str


@dataclass(frozen=True, slots=True)
class ToolUseBlock:
    """A tool call made by the model; ``id`` is the model's call id, echoed by the result.

    ``raw_arguments`` is the model's argument text when it was not a JSON object (``arguments``
    is then ``{}``; the tool result tells the model so); None for valid arguments. It goes back
    to the model in later requests where the wire format can carry it (OpenAI's string
    ``arguments``), so the history shows what the model actually sent.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    """The outcome of one tool call; ``tool_call_id`` is the id of the :class:`ToolUseBlock`."""

    tool_call_id: str
    content: str
    is_error: bool = False
    tool_name: str | None = None


@dataclass(frozen=True, slots=True)
class ImageBlock:
    """An inline image: ``data`` is base64 (no ``data:`` prefix), ``mime_type`` e.g. image/png."""

    mime_type: str
    data: str


ContentBlock = TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock | ToolResultBlock | ImageBlock


def block_to_dict(block: ContentBlock) -> dict[str, Any]:
    """The dict form of one block, with its ``type`` discriminator."""
    match block:
        case TextBlock(text):
            return {"type": "text", "text": text}
        case ThinkingBlock(text, signature):
            out: dict[str, Any] = {"type": "thinking", "text": text}
            if signature is not None:
                out["signature"] = signature
            return out
        case RedactedThinkingBlock(data):
            return {"type": "redacted_thinking", "data": data}
        case ToolUseBlock(id_, name, arguments, raw_arguments):
            out = {"type": "tool_use", "id": id_, "name": name, "arguments": arguments}
            if raw_arguments is not None:
                out["raw_arguments"] = raw_arguments
            return out
        case ToolResultBlock(tool_call_id, content, is_error, tool_name):
            out = {
                "type": "tool_result",
                "tool_call_id": tool_call_id,
                "content": content,
                "is_error": is_error,
            }
            if tool_name is not None:
                out["tool_name"] = tool_name
            return out
        case ImageBlock(mime_type, data):
            return {"type": "image", "mime_type": mime_type, "data": data}
    raise TypeError(f"not a content block: {block!r}")


def _field(
    d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, *, optional: bool = False
) -> Any:
    value = d.get(key)
    if value is None and optional:
        return None
    # bool is an int subclass: never accept it where a str/dict is expected, and vice versa.
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ValueError(f"{where}.{key} must be {names}, got {type(value).__name__}")
    return value


def block_from_dict(data: Any, where: str = "block") -> ContentBlock:
    """Rebuild one block from its dict form.

    Raises:
        ValueError: not a block dict; names ``where`` and the bad field.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be an object, got {type(data).__name__}")
    kind = data.get("type")
    if kind == "text":
        return TextBlock(_field(data, "text", str, where))
    if kind == "thinking":
        return ThinkingBlock(
            _field(data, "text", str, where), _field(data, "signature", str, where, optional=True)
        )
    if kind == "redacted_thinking":
        return RedactedThinkingBlock(_field(data, "data", str, where))
    if kind == "tool_use":
        return ToolUseBlock(
            _field(data, "id", str, where),
            _field(data, "name", str, where),
            _field(data, "arguments", dict, where),
            _field(data, "raw_arguments", str, where, optional=True),
        )
    if kind == "tool_result":
        return ToolResultBlock(
            _field(data, "tool_call_id", str, where),
            _field(data, "content", str, where),
            bool(_field(data, "is_error", bool, where, optional=True)),
            _field(data, "tool_name", str, where, optional=True),
        )
    if kind == "image":
        return ImageBlock(_field(data, "mime_type", str, where), _field(data, "data", str, where))
    raise ValueError(f"{where}.type {kind!r} is not a known content block type")
