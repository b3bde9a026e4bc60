"""Stream chunks a provider yields (seed 003 §6.1).

A provider stream is a sequence of these small immutable values, created per token, so they are
slotted dataclasses with no behaviour. They stay between ``providers/`` and the agent loop; they
never reach a channel, a client or the database.

Order guarantees of a successful stream: text/reasoning/tool-call chunks in arrival order, a
``ToolCallStart`` before any ``ToolCallArgumentsDelta`` of its ``index``, then at most one
``UsageChunk`` and one ``ProviderStateChunk``, then exactly one ``Done`` (last). A failed stream
has no ``Done``: the provider raises a ``ProviderError`` after yielding what arrived.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from providers.messages import Usage


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Visible answer text."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Readable reasoning text (reasoning fields, think tags, Anthropic thinking)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call begins (or learns its id/name: a repeat for the same ``index`` fills blanks).

    ``index`` numbers the calls of one response from 0 in creation order; ``id`` or ``name`` may
    be ``""`` when the vendor sends them on a later fragment.
    """

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsDelta:
    """A fragment of the JSON argument text of call ``index``, appended in arrival order."""

    index: int
    delta: str


@dataclass(frozen=True, slots=True)
class ProviderStateChunk:
    """Replay state for the next request (``{"provider": name, ...}``); the last one wins."""

    state: dict[str, Any]


@dataclass(frozen=True, slots=True)
class UsageChunk:
    """Token usage of this call; the last one wins."""

    usage: Usage


@dataclass(frozen=True, slots=True)
class Done:
    """The stream finished successfully; ``finish_reason`` is provider-native (``stop``,
    ``length``, ``tool_calls``, ``end_turn``, ``tool_use``…) or None when none was sent."""

    finish_reason: str | None


ProviderChunk = (
    TextDelta
    | ReasoningDelta
    | ToolCallStart
    | ToolCallArgumentsDelta
    | ProviderStateChunk
    | UsageChunk
    | Done
)
