"""Agent semantic events: the facts the agent loop reports about a running turn.

The agent loop turns provider stream chunks into these events and hands them to
:meth:`delivery.turn.TurnController.apply`; nothing else consumes them (seed 003 §6.6). Lifecycle
transitions (finalize, complete, cancel, fail) are *not* events: the session calls the controller
for those, because only the session owns persistence and the stale-state check (seed 003 §8.2).

All events are immutable. ``iteration`` is the 0-based model request number within the turn (one
provider call plus the tools it asked for); a change of iteration always starts new blocks.

Pure module: no Django, Channels or httpx imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from delivery.snapshot import TurnPhase

__all__ = [
    "PhaseChanged",
    "ReasoningDelta",
    "TextDelta",
    "TextSegmentFinished",
    "ToolFinished",
    "ToolStarted",
    "TurnEvent",
]


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of displayable model reasoning (never ``provider_state``; seed 003 §6.2).

    Attributes:
        iteration: 0-based model request number within the turn.
        delta: The new text; an empty string is ignored by the controller.
    """

    iteration: int
    delta: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the assistant's answer text.

    Attributes:
        iteration: 0-based model request number within the turn.
        delta: The new text; an empty string is ignored by the controller.
    """

    iteration: int
    delta: str


@dataclass(frozen=True, slots=True)
class TextSegmentFinished:
    """Ends the current answer-text segment: the next ``TextDelta`` starts a new block.

    The agent loop sends it before running tools (seed 003 §8.1). It changes nothing visible.

    Attributes:
        iteration: The iteration whose text segment ends.
    """

    iteration: int


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """The agent began executing a tool call.

    Attributes:
        iteration: 0-based model request number that asked for the call.
        call_id: The model's tool-call id; unique within the turn (the tool block's ``id``).
        name: Tool name as the model spelled it (may be unknown to the registry).
        arguments: Parsed JSON arguments, or the raw string when they did not parse.
    """

    iteration: int
    call_id: str
    name: str
    arguments: dict[str, Any] | str


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """A tool call ended.

    Attributes:
        iteration: Iteration of the matching ``ToolStarted``.
        call_id: Id of a running tool call of this turn.
        success: False when the result is an error (unknown tool, bad arguments, timeout,
            refusal or the tool's own error; DESIGN §6); the block becomes ``failed``.
        preview: Short human-readable result summary, or None.
    """

    iteration: int
    call_id: str
    success: bool
    preview: str | None = None


@dataclass(frozen=True, slots=True)
class PhaseChanged:
    """An explicit phase change that no delta implies, e.g. ``TurnPhase.COMPACTING``.

    Attributes:
        phase: A :class:`delivery.snapshot.TurnPhase` (or its string value).
    """

    phase: TurnPhase | str


TurnEvent: TypeAlias = (
    ReasoningDelta | TextDelta | TextSegmentFinished | ToolStarted | ToolFinished | PhaseChanged
)
