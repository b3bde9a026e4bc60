"""Provider-neutral conversation messages (seed 002, FIX-B/FIX-C).

A :class:`Message` is a role plus an ordered list of content blocks (:mod:`providers.blocks`).
Vendor modules map it to their wire format; storage keeps it through a lossless JSON form::

    {"role": "assistant",
     "content": [{"type": "thinking", "text": "…", "signature": "…"},
                 {"type": "text", "text": "It is 10:42."},
                 {"type": "tool_use", "id": "call_1", "name": "current_time", "arguments": {}}],
     "provider_state": {"provider": "anthropic", "endpoint": "api.anthropic.com",
                        "blocks": […]}}                               # key omitted when None

``provider_state`` is opaque replay data of the endpoint that produced the message (seed 003
§6.2); it never leaves the server. Its ``provider`` and ``endpoint`` keys are the producer's
replay identity (:mod:`providers.replay_identity`), which decides whether a provider may get
it back. Its optional ``blocks`` list is the response's block layout (see
:meth:`Message.assistant`).

Pure module: no Django, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from providers.blocks import (
    ContentBlock,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    block_from_dict,
    block_to_dict,
)

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})


# Marks the per-request runtime context (time, channel, title) that the gateway appends to the
# last user message (seed 000 §7.1). It is never stored; the offline replay provider ignores it.
RUNTIME_CONTEXT_MARKER = "\n\n[Runtime context: "


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation message.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: ordered content blocks.
        provider_state: opaque replay state of the provider that produced an assistant message
            (``{"provider": name, ...}``), or None.
    """

    role: Role
    content: list[ContentBlock]
    provider_state: dict[str, Any] | None = None

    # --- constructors -------------------------------------------------------------------------

    @classmethod
    def system(cls, text: str) -> Message:
        """A system prompt message."""
        return cls("system", [TextBlock(text)])

    @classmethod
    def user(cls, text: str, images: Iterable[ImageBlock] = ()) -> Message:
        """A user message: the text (omitted when empty) followed by the images."""
        blocks: list[ContentBlock] = [TextBlock(text)] if text else []
        blocks.extend(images)
        return cls("user", blocks)

    @classmethod
    def assistant(
        cls,
        text: str = "",
        reasoning: str | None = None,
        tool_calls: Iterable[ToolUseBlock] = (),
        provider_state: dict[str, Any] | None = None,
    ) -> Message:
        """An assistant message: reasoning, text, then tool calls — or the stored block layout.

        ``provider_state["blocks"]`` (when present) is the response's block order, so that
        interleaved thinking (thinking, text, thinking, tool_use) is rebuilt exactly as it
        streamed (seed 003 §7.3: replay keeps the vendor's block order). Its items are

        * ``{"type": "thinking", "text", "signature"?}`` / ``{"type": "redacted_thinking",
          "data"}``: the replayable blocks themselves (block dict form);
        * ``{"type": "text", "chars": n}``: the next ``n`` characters of ``text`` (the text is
          stored once, in its own column; the layout only cuts it);
        * ``{"type": "tool_use", "id": id}``: the call of ``tool_calls`` with that id (a call
          not in ``tool_calls`` is skipped: the last iteration drops unrun calls).

        Text and calls the layout does not place follow it, in order. A layout whose ``chars``
        do not add up to ``len(text)`` is inconsistent (the text was changed after the fact): its
        thinking blocks then lead, as in the plain order. A layout of thinking blocks only (rows
        written before layouts existed) is the plain order too. A corrupt state is ignored: it
        means "no replay", never an unreadable message (DESIGN §6). Replayable thinking blocks
        replace a plain :class:`ThinkingBlock` of ``reasoning``.

        Empty or whitespace-only text is dropped (seed SC-25: vendors reject empty text blocks).
        """
        calls = list(tool_calls)
        keep_text = bool(text and text.strip())
        blocks = _layout_blocks(provider_state, text if keep_text else "", calls)
        if blocks is None:
            blocks = _replay_blocks(provider_state)
            if keep_text:
                blocks.append(TextBlock(text))
            blocks.extend(calls)
        if reasoning and not any(isinstance(b, ThinkingBlock | RedactedThinkingBlock) for b in blocks):
            blocks.insert(0, ThinkingBlock(reasoning))
        return cls("assistant", blocks, provider_state)

    @classmethod
    def tool_result(
        cls, tool_call_id: str, content: str, is_error: bool = False, tool_name: str | None = None
    ) -> Message:
        """A ``tool`` message answering the call ``tool_call_id``."""
        return cls("tool", [ToolResultBlock(tool_call_id, content, is_error, tool_name)])

    # --- views --------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        """The text blocks joined (``""`` when there are none)."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def reasoning(self) -> str | None:
        """The thinking blocks' text joined, or None when there is no thinking block."""
        parts = [b.text for b in self.content if isinstance(b, ThinkingBlock)]
        return "".join(parts) if parts else None

    @property
    def tool_calls(self) -> list[ToolUseBlock]:
        """The tool calls, in order."""
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    # --- JSON ---------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict form (see the module docstring)."""
        out: dict[str, Any] = {"role": self.role, "content": [block_to_dict(b) for b in self.content]}
        if self.provider_state is not None:
            out["provider_state"] = self.provider_state
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Message:
        """Rebuild a message from :meth:`to_dict` output.

        Raises:
            ValueError: ``data`` is not a message dict (unknown role, missing or mistyped field,
                unknown block type); the message says which field.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"message must be an object, got {type(data).__name__}")
        role = data.get("role")
        if role not in ROLES:
            raise ValueError(f"message.role must be one of {sorted(ROLES)}, got {role!r}")
        content = data.get("content")
        if not isinstance(content, list):
            raise ValueError("message.content must be a list of blocks")
        blocks = [block_from_dict(item, where=f"message.content[{i}]") for i, item in enumerate(content)]
        state = data.get("provider_state")
        if state is not None and not isinstance(state, dict):
            raise ValueError("message.provider_state must be an object or null")
        return cls(role, blocks, state)


_REPLAYABLE = ("thinking", "redacted_thinking")


def _layout(provider_state: Any) -> list[Any] | None:
    if not isinstance(provider_state, dict):
        return None
    raw = provider_state.get("blocks")
    return raw if isinstance(raw, list) else None


def _replay_blocks(provider_state: Any) -> list[ContentBlock]:
    """The thinking/redacted blocks of the layout, in order; [] when absent or corrupt."""
    layout = _layout(provider_state)
    if layout is None:
        return []
    blocks: list[ContentBlock] = []
    for item in layout:
        if isinstance(item, Mapping) and item.get("type") in _REPLAYABLE:
            try:
                blocks.append(block_from_dict(item))
            except ValueError:
                return []
        elif not (isinstance(item, Mapping) and item.get("type") in ("text", "tool_use")):
            return []
    return blocks


def _layout_blocks(provider_state: Any, text: str, calls: list[ToolUseBlock]) -> list[ContentBlock] | None:
    """The blocks in the stored layout order (see :meth:`Message.assistant`), or None when the
    state has no usable layout (absent, corrupt, thinking only, or inconsistent with ``text``)."""
    layout = _layout(provider_state)
    if not layout or not any(
        isinstance(i, Mapping) and i.get("type") in ("text", "tool_use") for i in layout
    ):
        return None
    by_id = {c.id: c for c in calls}
    placed: set[str] = set()
    blocks: list[ContentBlock] = []
    position = 0
    cut = False
    for item in layout:
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind in _REPLAYABLE:
            try:
                blocks.append(block_from_dict(item))
            except ValueError:
                return None
        elif kind == "text":
            chars = item.get("chars")
            if not isinstance(chars, int) or isinstance(chars, bool) or chars < 0:
                return None
            piece = text[position : position + chars]
            position += chars
            cut = True
            if piece:
                blocks.append(TextBlock(piece))
        elif kind == "tool_use":
            call = by_id.get(item.get("id"))  # type: ignore[arg-type]
            if call is not None and call.id not in placed:
                placed.add(call.id)
                blocks.append(call)
        else:
            return None
    if cut and position != len(text) and text:
        return None
    if not cut and text:
        blocks.append(TextBlock(text))
    blocks.extend(c for c in calls if c.id not in placed)
    return blocks


def messages_to_json(messages: Sequence[Message]) -> str:
    """Serialise messages to a JSON array (UTF-8 text, no NaN/Infinity).

    Raises:
        ValueError: a tool call's arguments hold a value JSON cannot represent.
    """
    return json.dumps([m.to_dict() for m in messages], ensure_ascii=False, allow_nan=False)


def messages_from_json(text: str) -> list[Message]:
    """Parse :func:`messages_to_json` output.

    Raises:
        ValueError: invalid JSON, not an array, or an invalid message (the message says where).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"messages JSON is not valid JSON: {exc}") from exc
    if not isinstance(data, list):
        raise ValueError("messages JSON must be an array")
    out = []
    for i, item in enumerate(data):
        try:
            out.append(Message.from_dict(item))
        except ValueError as exc:
            raise ValueError(f"messages[{i}]: {exc}") from exc
    return out


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool offered to the model: ``parameters`` is a JSON schema object."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one provider call (``prompt``→``input``, ``completion``→``output``).

    ``input_tokens`` includes ``cached_tokens`` (the prompt tokens the provider served from its
    cache, as OpenAI reports them); ``output_tokens`` includes ``reasoning_tokens``. The two
    breakdowns are 0 when the provider gave none; ``to_dict`` stores only input and output.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        """``{"input_tokens": int, "output_tokens": int}``."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}

    @classmethod
    def from_dict(cls, data: Any) -> Usage:
        """Rebuild from :meth:`to_dict` output; missing counts are 0.

        Raises:
            ValueError: not an object, or a count that is not a non-negative integer.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"usage must be an object, got {type(data).__name__}")
        counts = []
        for key in ("input_tokens", "output_tokens"):
            value = data.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"usage.{key} must be a non-negative integer, got {value!r}")
            counts.append(value)
        return cls(*counts)
