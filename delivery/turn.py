"""The running turn's only writer: :class:`TurnController` reduces :mod:`delivery.events` into
ordered blocks (seed 003 §6.3–§6.5, §8.2).

Every visible change bumps the revision and wakes the controller's
:class:`~delivery.cell.LatestSnapshotCell`; :meth:`TurnController.snapshot` materialises the
:class:`~delivery.snapshot.TurnSnapshot` of the current revision (lazily, cached per revision).
Applying a delta is O(1) amortised: it appends to the open block's parts; text is joined only
when a snapshot is materialised (DESIGN §7).

Errors: :class:`TurnEventError` (a ``ValueError``) for impossible input — a duplicate tool-call
id, finishing a tool that is not running, a non-string delta, an unknown phase. Events and
lifecycle calls after a terminal status are dropped silently (seed 003 §14.1: late deltas). The
block, segment and argument rules are in ``delivery/README.md``.

Pure module: no Django, Channels or httpx imports.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from delivery.cell import LatestSnapshotCell
from delivery.events import (
    PhaseChanged,
    ReasoningDelta,
    TextDelta,
    TextSegmentFinished,
    ToolFinished,
    ToolStarted,
    TurnEvent,
)
from delivery.snapshot import ASSISTANT, REASONING, TOOL, ToolStatus, TurnPhase, TurnSnapshot, TurnStatus
from providers.json_depth import value_too_deep

__all__ = [
    "MAX_ARGUMENTS_BYTES",
    "MAX_PREVIEW_CHARS",
    "TurnController",
    "TurnEventError",
    "shown_arguments",
]

#: Tool previews longer than this are cut (with "…"): every live snapshot carries them.
MAX_PREVIEW_CHARS = 2000
#: Tool arguments larger than this as JSON (UTF-8 bytes) are shown as ``{"_truncated": "<N> bytes"}``.
MAX_ARGUMENTS_BYTES = 8 * 1024


class TurnEventError(ValueError):
    """An event that cannot happen in a well-formed turn (a bug in the caller, not in the model)."""


class _TextBlock:
    """A reasoning or assistant block: parts are appended per delta and joined on demand."""

    __slots__ = ("type", "id", "iteration", "segment", "parts", "_view")

    def __init__(self, type_: str, block_id: str, iteration: int, segment: int, first: str) -> None:
        self.type = type_
        self.id = block_id
        self.iteration = iteration
        self.segment = segment  # the controller's segment number when the block was opened
        self.parts = [first]
        self._view: dict[str, Any] | None = None

    def append(self, delta: str) -> None:
        self.parts.append(delta)
        self._view = None

    def view(self) -> dict[str, Any]:
        if self._view is None:
            text = "".join(self.parts)
            # Keep the joined text as the single part so the next join copies it once.
            self.parts = [text]
            self._view = {"type": self.type, "id": self.id, "iteration": self.iteration, "text": text}
        return self._view


class _ToolBlock:
    __slots__ = ("id", "iteration", "segment", "name", "arguments", "status", "preview", "_view")

    type = TOOL

    def __init__(
        self, call_id: str, iteration: int, segment: int, name: str, arguments: dict[str, Any]
    ) -> None:
        self.id = call_id
        self.iteration = iteration
        self.segment = segment
        self.name = name
        self.arguments = arguments
        self.status = ToolStatus.RUNNING
        self.preview: str | None = None
        self._view: dict[str, Any] | None = None

    def finish(self, status: ToolStatus, preview: str | None) -> None:
        self.status = status
        self.preview = preview
        self._view = None

    def view(self) -> dict[str, Any]:
        if self._view is None:
            self._view = {
                "type": TOOL,
                "id": self.id,
                "iteration": self.iteration,
                "name": self.name,
                "arguments": self.arguments,
                "status": self.status.value,
                "preview": self.preview,
            }
        return self._view


def shown_arguments(arguments: object) -> dict[str, Any]:
    """A tool block's ``arguments`` (``delivery/README.md``): a private copy of a JSON object, ``{}`` for
    anything else, ``{"_truncated": "<N> bytes"}`` for one over :data:`MAX_ARGUMENTS_BYTES`.

    An object nested deeper than ``json_depth.MAX_JSON_DEPTH`` levels shows as ``{}``: it is
    checked without recursion before ``json.dumps`` and ``copy.deepcopy`` (both recursive) see it.
    """
    if not isinstance(arguments, dict) or value_too_deep(arguments):
        return {}
    try:
        size = len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), default=str).encode())
    except (TypeError, ValueError):  # a cycle, NaN, a key that is not a string: not JSON
        return {}
    if size > MAX_ARGUMENTS_BYTES:
        return {"_truncated": f"{size} bytes"}
    return copy.deepcopy(arguments)


class TurnController:
    """The only writer of one turn's state (seed 003 §8.2, §16).

    Does no I/O. Call it from the event loop that runs the turn; readers watch :attr:`cell`.

    Args:
        turn_id: The turn's id (also the prefix of its block ids).
        session_id: The dialog's unified id ``"{channel}:{chat_id}:{dialog_id}"``.
        message_id: The id pre-allocated for the turn's final assistant message.
        first_revision: The revision of the initial snapshot (default 0). A process that reports
            a turn it did not run (a restart's "interrupted") starts high, so clients that saw the
            old process's revisions still accept its terminal snapshot.
    """

    def __init__(self, turn_id: str, session_id: str, message_id: str, *, first_revision: int = 0) -> None:
        self.turn_id = turn_id
        self.session_id = session_id
        self.message_id = message_id
        self._blocks: list[_TextBlock | _ToolBlock] = []
        self._tools: dict[str, _ToolBlock] = {}
        self._running_tools = 0
        self._has_answer = False
        self._segment = 0  # bumped by TextSegmentFinished and ToolStarted (delivery/README.md)
        self._revision = first_revision
        self._status = TurnStatus.RUNNING
        self._phase = TurnPhase.QUEUED
        self._usage: dict[str, Any] | None = None
        self._truncated = False
        self._error: str | None = None
        self._snapshot: TurnSnapshot | None = None
        self.cell = LatestSnapshotCell(self)
        """Where readers wait for changes (the seeds' ``watch`` receiver)."""

    @property
    def revision(self) -> int:
        """Starts at 0 (queued, no blocks) and grows by one per visible change."""
        return self._revision

    @property
    def status(self) -> TurnStatus:
        return self._status

    @property
    def phase(self) -> TurnPhase:
        return self._phase

    @property
    def is_terminal(self) -> bool:
        return self._status is not TurnStatus.RUNNING

    def apply(self, event: TurnEvent) -> bool:
        """Reduces one agent event into the turn.

        Returns:
            True when the turn changed (a new revision was published). False when the turn is
            terminal (the event is dropped) or the event changes nothing visible: an empty delta,
            a ``TextSegmentFinished``, a ``PhaseChanged`` to the current phase.

        Raises:
            TurnEventError: For impossible input (see the module docstring); nothing changes.
        """
        if self._status is not TurnStatus.RUNNING:
            return False
        match event:
            case TextDelta(iteration=iteration, delta=delta):
                return self._text(ASSISTANT, iteration, delta, TurnPhase.RESPONDING)
            case ReasoningDelta(iteration=iteration, delta=delta):
                return self._text(REASONING, iteration, delta, TurnPhase.REASONING)
            case TextSegmentFinished():
                # Invisible by itself: the next assistant delta opens a new block (and run).
                self._segment += 1
                return False
            case ToolStarted():
                return self._tool_started(event)
            case ToolFinished():
                return self._tool_finished(event)
            case PhaseChanged(phase=phase):
                return self.set_phase(phase)
        raise TurnEventError(f"not a turn event: {type(event).__name__}")

    def set_phase(self, phase: TurnPhase | str) -> bool:
        """Sets the phase explicitly (e.g. compacting). Returns True when it changed.

        Raises:
            TurnEventError: ``phase`` is not a ``TurnPhase`` value.
        """
        try:
            phase = TurnPhase(phase)
        except ValueError as exc:
            raise TurnEventError(f"unknown turn phase: {phase!r}") from exc
        if self._status is not TurnStatus.RUNNING or phase is self._phase:
            return False
        self._phase = phase
        self._changed()
        return True

    def begin_compacting(self) -> bool:
        """The turn's input is being compacted (phase ``compacting``; seed 002 §6d, PROTOCOL §1).

        Returns True when the phase changed; False on a terminal turn or one already compacting.
        """
        return self.set_phase(TurnPhase.COMPACTING)

    def end_compacting(self) -> bool:
        """Compaction ended (done or failed): the model request comes next, phase ``responding``
        (never back to ``queued``: the turn left the queue when it started compacting).

        Only leaves ``compacting``: any other phase (set meanwhile) is kept. Returns True when the
        phase changed.
        """
        if self._phase is not TurnPhase.COMPACTING:
            return False
        return self.set_phase(TurnPhase.RESPONDING)

    def begin_finalizing(self) -> bool:
        """The model is done and the session is committing (phase ``finalizing``)."""
        return self.set_phase(TurnPhase.FINALIZING)

    def complete(self, usage: dict[str, Any] | None = None, *, truncated: bool = False) -> bool:
        """Marks the turn completed. Call only after the turn's rows are committed (seed 003 §14).

        A turn without answer text completes too, with ``empty_answer`` set (seed 003 §7.4).

        Args:
            usage: Provider token usage as a JSON-ready dict (copied), or None.
            truncated: The turn's last model response stopped at the output limit.

        Returns:
            True, or False when the turn was already terminal (nothing changes).
        """
        if self._status is TurnStatus.RUNNING:
            self._truncated = truncated
        return self._finish(TurnStatus.COMPLETED, error=None, usage=usage)

    def cancel(self, reason: str | None = None) -> bool:
        """Marks the turn cancelled; ``reason`` (if any) goes into ``error``. False if terminal."""
        return self._finish(TurnStatus.CANCELLED, error=reason, usage=None)

    def fail(self, error: str) -> bool:
        """Marks the turn failed with a user-safe message (no secrets). False if terminal."""
        return self._finish(TurnStatus.FAILED, error=str(error), usage=None)

    def snapshot(self) -> TurnSnapshot:
        """Returns the state at the current revision (built on first call, then cached)."""
        snap = self._snapshot
        if snap is not None and snap.revision == self._revision:
            return snap
        snap = TurnSnapshot(
            id=self.turn_id,
            session_id=self.session_id,
            message_id=self.message_id,
            revision=self._revision,
            status=self._status,
            phase=self._phase,
            blocks=tuple(block.view() for block in self._blocks),
            usage=self._usage,
            error=self._error,
            empty_answer=self._status is TurnStatus.COMPLETED and not self._has_answer,
            truncated=self._truncated,
            segments=tuple(block.segment for block in self._blocks),
        )
        self._snapshot = snap
        return snap

    # -- internals ---------------------------------------------------------------------------

    def _changed(self) -> None:
        self._revision += 1
        self.cell.notify()

    def _text(self, type_: str, iteration: int, delta: str, phase: TurnPhase) -> bool:
        if type(delta) is not str:
            raise TurnEventError(f"{type_} delta must be str, got {type(delta).__name__}")
        if not delta:
            return False
        last = self._blocks[-1] if self._blocks else None
        if (
            last is not None
            and last.type == type_
            and last.iteration == iteration
            # A segment boundary closes an answer block; reasoning goes on across it.
            and (type_ == REASONING or last.segment == self._segment)
        ):
            last.append(delta)
        else:
            block_id = f"{self.turn_id}.{len(self._blocks)}"
            self._blocks.append(_TextBlock(type_, block_id, iteration, self._segment, delta))
        if type_ == ASSISTANT:
            self._has_answer = True
        if self._running_tools == 0:
            self._phase = phase
        self._changed()
        return True

    def _tool_started(self, event: ToolStarted) -> bool:
        if not isinstance(event.call_id, str) or not event.call_id:
            raise TurnEventError("tool call id must be a non-empty str")
        if event.call_id in self._tools:
            raise TurnEventError(f"duplicate tool call id {event.call_id!r}")
        arguments = shown_arguments(event.arguments)
        self._segment += 1  # text after a tool call is a new segment, even when tools are hidden
        block = _ToolBlock(event.call_id, event.iteration, self._segment, event.name, arguments)
        self._tools[event.call_id] = block
        self._blocks.append(block)
        self._running_tools += 1
        self._phase = TurnPhase.ACTING
        self._changed()
        return True

    def _tool_finished(self, event: ToolFinished) -> bool:
        block = self._tools.get(event.call_id)
        if block is None:
            raise TurnEventError(f"unknown tool call id {event.call_id!r}")
        if block.status is not ToolStatus.RUNNING:
            raise TurnEventError(f"tool call {event.call_id!r} already finished")
        preview = event.preview
        if preview is not None and len(preview) > MAX_PREVIEW_CHARS:
            preview = preview[: MAX_PREVIEW_CHARS - 1] + "…"
        block.finish(ToolStatus.COMPLETED if event.success else ToolStatus.FAILED, preview)
        self._running_tools -= 1
        if self._running_tools == 0:
            # The agent now sends the results back to the model: waiting for its first chunk.
            self._phase = TurnPhase.QUEUED
        self._changed()
        return True

    def _finish(self, status: TurnStatus, *, error: str | None, usage: dict[str, Any] | None) -> bool:
        if self._status is not TurnStatus.RUNNING:
            return False
        if self._running_tools:
            # A terminal snapshot never shows a tool still running; the call did not finish.
            for block in self._tools.values():
                if block.status is ToolStatus.RUNNING:
                    block.finish(ToolStatus.FAILED, block.preview)
            self._running_tools = 0
        self._status = status
        if status is TurnStatus.COMPLETED:
            self._phase = TurnPhase.FINALIZING
        self._error = error
        self._usage = None if usage is None else dict(usage)
        self._changed()
        return True
