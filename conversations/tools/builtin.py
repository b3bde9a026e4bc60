"""The built-in tool ``current_time`` (pure); memory, plan and http_fetch live in their own modules."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from conversations.agent.tool_registry import Tool, ToolError

TIMEZONE_MAX_CHARS = 64
"""Longer than any IANA name (the longest has about 30 characters)."""


async def current_time(arguments: dict) -> str:
    """ISO-8601 time now in ``arguments["timezone"]`` (IANA name, default UTC).

    Raises:
        ToolError: the time zone name is unknown or not a valid name (never another error).
    """
    name = str(arguments.get("timezone") or "UTC")
    shown = name if len(name) <= TIMEZONE_MAX_CHARS else name[: TIMEZONE_MAX_CHARS - 1] + "…"
    problem = f"unknown time zone {shown!r}; use an IANA name like 'Europe/Paris'"
    if len(name) > TIMEZONE_MAX_CHARS:
        raise ToolError(problem)
    try:
        zone = ZoneInfo(name)
    except Exception as exc:  # not found, a bad key, or the OS refusing the path (name too long)
        raise ToolError(problem) from exc
    return datetime.now(zone).isoformat(timespec="seconds")


def current_time_tool() -> Tool:
    """The ``current_time`` tool definition."""
    return Tool(
        name="current_time",
        description="Get the current date and time (ISO 8601). Optionally in an IANA time zone.",
        parameters={
            "type": "object",
            "properties": {
                "timezone": {
                    "type": "string",
                    "maxLength": TIMEZONE_MAX_CHARS,
                    "description": "IANA time zone, e.g. 'Asia/Shanghai'. Default UTC.",
                }
            },
            "additionalProperties": False,
        },
        handler=current_time,
        timeout=5.0,
    )
