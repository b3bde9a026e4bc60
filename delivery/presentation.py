"""What a target may see of a turn: the presentation filter (seed 003 §11).

The :class:`~delivery.coordinator.DeliveryCoordinator` applies the policy before a snapshot leaves
the core, so hidden reasoning never reaches a sink (hiding it in a client is not enough): a sink
gets a :class:`PresentedSnapshot` — a ``TurnSnapshot`` whose ``blocks``, ``to_dict()`` and
``answer_text()`` are the filtered view — and its JSON, made from that same view. The filter never
mutates its input or any history.

After removing blocks the filter merges text blocks that only the removed blocks had split (same
type, iteration and segment, see :mod:`delivery.snapshot`), so the filtered view keeps PROTOCOL's rule
that no two adjacent blocks are mergeable: "The answer is ", reasoning, "42." becomes one
assistant block "The answer is 42." when reasoning is hidden. The merged block keeps the first
block's id.

Defaults (seed 003 §11): WebUI/TUI ``websocket()`` = collapsed reasoning, detailed tools, live;
external platforms ``external()`` = hidden reasoning, compact tools; unattended delivery
``final_only()`` = hidden reasoning, compact tools, no live updates.

Pure module: no Django, Channels or httpx imports.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from delivery.snapshot import TurnSnapshot, derive_segments

__all__ = [
    "COMPACT_PREVIEW_CHARS",
    "PresentationPolicy",
    "PresentedSnapshot",
    "ReasoningVisibility",
    "ToolVisibility",
    "serialize_snapshot",
]

#: Compact tool blocks keep at most this many characters of the preview.
COMPACT_PREVIEW_CHARS = 160


class ReasoningVisibility(StrEnum):
    HIDDEN = "hidden"  # reasoning blocks are removed
    COLLAPSED = "collapsed"  # sent; the client shows them folded
    EXPANDED = "expanded"  # sent; the client shows them open


class ToolVisibility(StrEnum):
    HIDDEN = "hidden"  # tool blocks are removed
    COMPACT = "compact"  # name and status only, preview shortened, no arguments
    DETAILED = "detailed"  # everything


@dataclass(frozen=True, slots=True)
class PresentationPolicy:
    """A per-target presentation filter.

    Args:
        reasoning: ``"hidden"``, ``"collapsed"`` or ``"expanded"`` (or the enum).
        tools: ``"hidden"``, ``"compact"`` or ``"detailed"`` (or the enum).
        live: False delivers only the terminal snapshot, whatever the sink supports.

    Raises:
        ValueError: An unknown ``reasoning`` or ``tools`` value (e.g. from settings).
    """

    reasoning: ReasoningVisibility = ReasoningVisibility.COLLAPSED
    tools: ToolVisibility = ToolVisibility.DETAILED
    live: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "reasoning", ReasoningVisibility(self.reasoning))
        object.__setattr__(self, "tools", ToolVisibility(self.tools))

    @classmethod
    def websocket(cls) -> PresentationPolicy:
        """WebUI and TUI: reasoning collapsed, tools detailed, live."""
        return cls(ReasoningVisibility.COLLAPSED, ToolVisibility.DETAILED, live=True)

    @classmethod
    def external(cls) -> PresentationPolicy:
        """External platforms (Feishu): reasoning hidden, tools compact, live."""
        return cls(ReasoningVisibility.HIDDEN, ToolVisibility.COMPACT, live=True)

    @classmethod
    def final_only(cls) -> PresentationPolicy:
        """Scheduled/unattended delivery: reasoning hidden, tools compact, terminal state only."""
        return cls(ReasoningVisibility.HIDDEN, ToolVisibility.COMPACT, live=False)

    @property
    def hint(self) -> dict[str, str]:
        """The ``"presentation"`` member of a filtered ``turn`` object (a new dict)."""
        return {"reasoning": self.reasoning.value, "tools": self.tools.value}

    def present(self, snapshot: TurnSnapshot) -> PresentedSnapshot:
        """Returns the filtered view of ``snapshot``: what a sink may see (the one filtering).

        A :class:`PresentedSnapshot` is returned as is when this policy made it.
        """
        if isinstance(snapshot, PresentedSnapshot) and snapshot.policy == self:
            return snapshot
        blocks, segments = self.filter_blocks(snapshot.blocks, snapshot.segments_or_derived())
        values = {f.name: getattr(snapshot, f.name) for f in fields(TurnSnapshot)}
        values.update(blocks=tuple(blocks), segments=tuple(segments))
        return PresentedSnapshot(**values, policy=self)

    def apply(self, turn: dict[str, Any]) -> dict[str, Any]:
        """Returns a filtered copy of a ``turn`` dict; ``turn`` itself is left untouched.

        Prefer :meth:`present`: a wire dict does not record ``TextSegmentFinished``, so here only
        tool blocks count as segment boundaries when merging.

        Args:
            turn: PROTOCOL.md's ``turn`` object, as ``TurnSnapshot.to_dict()`` returns it.

        Returns:
            A new dict with new block dicts (nested ``arguments`` are shared, read-only) and a
            ``"presentation": {"reasoning": …, "tools": …}`` hint for the client's rendering.
            Hidden blocks are omitted; the remaining blocks keep their order and ids, except
            that text blocks only the hidden ones had split are merged (module docstring).
        """
        raw = turn.get("blocks", ())
        blocks, _ = self.filter_blocks(raw, derive_segments(raw))
        out = dict(turn)
        out["blocks"] = blocks
        out["presentation"] = self.hint
        return out

    def filter_blocks(
        self, blocks: Sequence[dict[str, Any]], segments: Sequence[int]
    ) -> tuple[list[dict[str, Any]], list[int]]:
        """Filters wire blocks and merges the runs that removed blocks had split.

        Args:
            blocks: Wire blocks, in order (left untouched).
            segments: Each block's segment number (``TurnSnapshot.segments_or_derived()``).

        Returns:
            ``(blocks, segments)``: new block dicts and their segment numbers.
        """
        out: list[dict[str, Any]] = []
        out_segments: list[int] = []
        removed = False  # a block was dropped since the last kept one
        for block, segment in zip(blocks, segments, strict=True):
            kind = block.get("type")
            if kind == "tool":
                if self.tools is ToolVisibility.HIDDEN:
                    removed = True
                    continue
                out.append(_compact_tool(block) if self.tools is ToolVisibility.COMPACT else dict(block))
            elif kind == "reasoning" and self.reasoning is ReasoningVisibility.HIDDEN:
                removed = True
                continue
            elif (
                removed
                and out
                and kind in ("reasoning", "assistant")
                and out[-1].get("type") == kind
                and out[-1].get("iteration") == block.get("iteration")
                and out_segments[-1] == segment
            ):
                # Only hidden blocks split this run: one block again, as history commits it.
                out[-1]["text"] += block["text"]  # out[-1] is our own copy
                removed = False
                continue
            else:
                out.append(dict(block))
            out_segments.append(segment)
            removed = False
        return out, out_segments


def _compact_tool(block: dict[str, Any]) -> dict[str, Any]:
    compact = {key: value for key, value in block.items() if key != "arguments"}
    preview = compact.get("preview")
    if isinstance(preview, str) and len(preview) > COMPACT_PREVIEW_CHARS:
        compact["preview"] = preview[: COMPACT_PREVIEW_CHARS - 1] + "…"
    return compact


@dataclass(frozen=True, slots=True)
class PresentedSnapshot(TurnSnapshot):
    """A turn snapshot as one target may see it: ``policy`` is already applied.

    ``blocks`` are the filtered (and re-merged) blocks, so ``answer_text()``, ``blocks`` and
    ``to_dict()`` never show what the policy hides. ``to_dict()`` adds the ``"presentation"``
    hint. Build it with :meth:`PresentationPolicy.present`.
    """

    policy: PresentationPolicy | None = None

    def to_dict(self) -> dict[str, Any]:
        """The filtered ``turn`` object, with the ``"presentation"`` hint (JSON-ready)."""
        turn = TurnSnapshot.to_dict(self)  # (zero-argument super() fails in slots dataclasses)
        if self.policy is not None:
            turn["presentation"] = self.policy.hint
        return turn


def serialize_snapshot(snapshot: TurnSnapshot, policy: PresentationPolicy) -> str:
    """Returns the compact JSON text of ``policy.present(snapshot).to_dict()``.

    The one serialisation per published snapshot (DESIGN §2, §7); sinks and every watcher share
    the string. Pass the :class:`PresentedSnapshot` the sink gets — it is serialised as it is,
    not filtered again (``policy`` must be the one that made it) — or a raw snapshot (filtered
    here). Non-ASCII text stays as is (``ensure_ascii=False``).
    """
    view = snapshot if isinstance(snapshot, PresentedSnapshot) else policy.present(snapshot)
    return json.dumps(view.to_dict(), ensure_ascii=False, separators=(",", ":"))
