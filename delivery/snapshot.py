"""A turn's state at one revision: the immutable :class:`TurnSnapshot` and its vocabulary
(seed 003 §6.3–§6.5; PROTOCOL.md's ``turn`` object).

``TurnSnapshot.to_dict()`` is the wire object::

    {"id", "session_id", "message_id", "revision", "status", "phase", "blocks", "usage", "error"}
    # blocks, in order of appearance:
    {"type": "reasoning", "id", "iteration", "text"}
    {"type": "assistant", "id", "iteration", "text"}
    {"type": "tool", "id": <tool_call_id>, "iteration", "name", "arguments", "status", "preview"}

plus ``"empty_answer": true`` on a completed turn that produced no answer text (seed 003 §7.4),
and ``"truncated": true`` on a completed turn whose last model response stopped at the output
limit (PROTOCOL §1).
``segments`` (not on the wire) numbers the text runs; the rules for revisions, segments and tool
arguments are in ``delivery/README.md``. A leaf: imports nothing else of ``delivery``.

Pure module: no Django, Channels or httpx imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "ASSISTANT",
    "REASONING",
    "TOOL",
    "ToolStatus",
    "TurnPhase",
    "TurnSnapshot",
    "TurnStatus",
    "derive_segments",
]

REASONING = "reasoning"
ASSISTANT = "assistant"
TOOL = "tool"


class TurnStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"


class TurnPhase(StrEnum):
    """What the turn is doing, for the client's spinner (seed 003 §6.4); not model reasoning."""

    QUEUED = "queued"  # waiting for the (next) first model chunk
    COMPACTING = "compacting"
    REASONING = "reasoning"
    RESPONDING = "responding"
    ACTING = "acting"  # while any tool call runs
    FINALIZING = "finalizing"  # model done, committing


class ToolStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class TurnSnapshot:
    """The full state of one turn at one revision. Immutable; share it freely.

    ``blocks`` holds plain dicts in the wire shape (see the module docstring). They are shared
    between snapshots and must be treated as read-only; :meth:`to_dict` returns copies.

    Attributes:
        revision: Strictly increasing per turn; clients keep the highest one.
        usage: Provider usage as given to ``complete()``, else None.
        error: The failure message, or the cancel reason; None otherwise.
        empty_answer: True on a completed turn without any answer text (seed 003 §7.4).
        truncated: True on a completed turn whose last model response stopped at the provider's
            output limit (``length``/``max_tokens``): its answer is cut off.
    """

    id: str
    session_id: str
    message_id: str
    revision: int
    status: TurnStatus
    phase: TurnPhase
    blocks: tuple[dict[str, Any], ...]
    usage: dict[str, Any] | None
    error: str | None
    empty_answer: bool = False
    truncated: bool = False
    segments: tuple[int, ...] = ()
    """Segment number of each block (aligned with ``blocks``; ``delivery/README.md``). Not
    part of the wire object. Empty on a hand-built snapshot: then tool blocks are the only
    boundaries (see :meth:`segments_or_derived`)."""

    @property
    def is_terminal(self) -> bool:
        """True for completed, cancelled and failed: the turn never changes again."""
        return self.status is not TurnStatus.RUNNING

    def to_dict(self) -> dict[str, Any]:
        """Returns PROTOCOL.md's ``turn`` object (a new dict with new block dicts; JSON-ready)."""
        turn: dict[str, Any] = {
            "id": self.id,
            "session_id": self.session_id,
            "message_id": self.message_id,
            "revision": self.revision,
            "status": self.status.value,
            "phase": self.phase.value,
            "blocks": [dict(block) for block in self.blocks],
            "usage": None if self.usage is None else dict(self.usage),
            "error": self.error,
        }
        if self.empty_answer:
            turn["empty_answer"] = True
        if self.truncated:
            turn["truncated"] = True
        return turn

    def segments_or_derived(self) -> tuple[int, ...]:
        """``segments`` when present, else derived from the blocks (each tool block ends one)."""
        if len(self.segments) == len(self.blocks):
            return self.segments
        return derive_segments(self.blocks)

    def answer_text(self, separator: str = "\n\n") -> str:
        """Returns the answer text as history commits it: one part per assistant message.

        Assistant blocks of one run (same iteration and segment: only reasoning between them)
        are one committed message and are concatenated as is; messages are joined by
        ``separator``. For a plain fallback message; "" when there is none (reasoning is never
        included). Independent of any presentation policy.
        """
        messages: list[list[str]] = []
        run: tuple[int, int] | None = None
        for block, segment in zip(self.blocks, self.segments_or_derived(), strict=True):
            if block["type"] != ASSISTANT:
                continue
            key = (block["iteration"], segment)
            if key == run:
                messages[-1].append(block["text"])
            else:
                messages.append([block["text"]])
                run = key
        return separator.join("".join(parts) for parts in messages)


def derive_segments(blocks: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> tuple[int, ...]:
    """Segment numbers for blocks without recorded ones: a tool block starts a new segment.

    (A ``TextSegmentFinished`` is not visible in the blocks; the controller records it.)
    """
    segments = []
    segment = 0
    for block in blocks:
        if block.get("type") == TOOL:
            segment += 1
        segments.append(segment)
    return tuple(segments)
