"""What a target may see of a turn: the presentation filter (seed 003 §11).

The :class:`~delivery.coordinator.DeliveryCoordinator` applies the policy before a snapshot leaves
the core, so hidden reasoning never reaches a sink (hiding it in a client is not enough). The
filter works on ``TurnSnapshot.to_dict()`` output and never mutates its input or any history.

Defaults (seed 003 §11): WebUI/TUI ``websocket()`` = collapsed reasoning, detailed tools, live;
external platforms ``external()`` = hidden reasoning, compact tools; unattended delivery
``final_only()`` = hidden reasoning, compact tools, no live updates.

Pure module: no Django, Channels or httpx imports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from delivery.turn import TurnSnapshot

__all__ = [
    "COMPACT_PREVIEW_CHARS",
    "PresentationPolicy",
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

    def apply(self, turn: dict[str, Any]) -> dict[str, Any]:
        """Returns a filtered copy of a ``turn`` dict; ``turn`` itself is left untouched.

        Args:
            turn: PROTOCOL.md's ``turn`` object, as ``TurnSnapshot.to_dict()`` returns it.

        Returns:
            A new dict with new block dicts (nested ``arguments`` are shared, read-only) and a
            ``"presentation": {"reasoning": …, "tools": …}`` hint for the client's rendering.
            Hidden blocks are omitted; the remaining blocks keep their order and ids.
        """
        blocks = []
        for block in turn.get("blocks", ()):
            kind = block.get("type")
            if kind == "reasoning":
                if self.reasoning is ReasoningVisibility.HIDDEN:
                    continue
                blocks.append(dict(block))
            elif kind == "tool":
                if self.tools is ToolVisibility.HIDDEN:
                    continue
                blocks.append(_compact_tool(block) if self.tools is ToolVisibility.COMPACT else dict(block))
            else:
                blocks.append(dict(block))
        out = dict(turn)
        out["blocks"] = blocks
        out["presentation"] = {"reasoning": self.reasoning.value, "tools": self.tools.value}
        return out


def _compact_tool(block: dict[str, Any]) -> dict[str, Any]:
    compact = {key: value for key, value in block.items() if key != "arguments"}
    preview = compact.get("preview")
    if isinstance(preview, str) and len(preview) > COMPACT_PREVIEW_CHARS:
        compact["preview"] = preview[: COMPACT_PREVIEW_CHARS - 1] + "…"
    return compact


def serialize_snapshot(snapshot: TurnSnapshot, policy: PresentationPolicy) -> str:
    """Returns the compact JSON text of ``policy.apply(snapshot.to_dict())``.

    The one serialisation per published snapshot (DESIGN §2, §7); sinks and every watcher share
    the string. Non-ASCII text stays as is (``ensure_ascii=False``).
    """
    return json.dumps(policy.apply(snapshot.to_dict()), ensure_ascii=False, separators=(",", ":"))
