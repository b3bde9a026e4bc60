"""Building presented snapshots the way the coordinator does (TurnController → external policy)."""

from __future__ import annotations

import asyncio

from delivery.events import ReasoningDelta, TextDelta, TextSegmentFinished, ToolFinished, ToolStarted
from delivery.presentation import PresentationPolicy, PresentedSnapshot
from delivery.turn import TurnController

POLICY = PresentationPolicy.external()
SECRET = "SECRET-REASONING"


def turn(turn_id: str = "t1") -> TurnController:
    return TurnController(turn_id, "feishu:oc_chat:d1", "m1")


def view(c: TurnController) -> PresentedSnapshot:
    return POLICY.present(c.snapshot())


def text_tool_text_steps() -> list:
    """A turn that thinks, writes, runs a tool, thinks and writes again: one step per change."""
    return [
        lambda c: c.apply(ReasoningDelta(0, SECRET)),
        lambda c: c.apply(TextDelta(0, "Let me ")),
        lambda c: c.apply(TextDelta(0, "look that up.")),
        lambda c: (
            c.apply(TextSegmentFinished(0)),
            c.apply(ToolStarted(0, "call_1", "web_search", {"q": "x"})),
        ),
        lambda c: c.apply(ToolFinished(0, "call_1", True, "3 results")),
        lambda c: c.apply(ReasoningDelta(1, SECRET + " again")),
        lambda c: c.apply(TextDelta(1, "The answer ")),
        lambda c: c.apply(TextDelta(1, "is 42.")),
        lambda c: c.begin_finalizing(),
    ]


def text_tool_text(c: TurnController) -> list[PresentedSnapshot]:
    """Plays :func:`text_tool_text_steps` on ``c``; returns the running views in order."""
    views = []
    for step in text_tool_text_steps():
        step(c)
        views.append(view(c))
    return views


async def play(c: TurnController) -> None:
    """Plays the steps with the event loop running between them (for a real coordinator: its
    throttle is on the loop's clock, so each step waits a little real time)."""
    for step in text_tool_text_steps():
        step(c)
        await asyncio.sleep(0.01)
