"""A test-only tool plugin: ``PICOBOT_TOOL_MODULES=tests.e2e.slow_tools``.

``slow_tool`` sleeps far longer than any test runs, so the end-to-end restart test can SIGKILL the
server while a turn is inside a tool call (DESIGN §3: the row is left ``started``).
"""

from __future__ import annotations

import asyncio

from conversations.tools import Tool, ToolRegistry

SLOW_TOOL = "slow_tool"
SLOW_SECONDS = 300.0


async def slow(arguments: dict) -> str:
    """Sleep ``arguments["seconds"]`` (default 300 s), then say so."""
    seconds = float(arguments.get("seconds", SLOW_SECONDS))
    await asyncio.sleep(seconds)
    return f"slept {seconds:g} s"


def register(registry: ToolRegistry) -> None:
    """Plugin entry point: add ``slow_tool`` (its own timeout outlasts the sleep)."""
    registry.register(
        Tool(
            name=SLOW_TOOL,
            description="Wait a long time (test tool).",
            parameters={
                "type": "object",
                "properties": {"seconds": {"type": "number"}},
                "additionalProperties": False,
            },
            handler=slow,
            timeout=SLOW_SECONDS * 2,
        )
    )
