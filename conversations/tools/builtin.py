"""Built-in tool ``current_time`` (issue 2); memory, plan and http_fetch live in their own modules."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from conversations.tools.registry import Tool, ToolError


async def current_time(arguments: dict) -> str:
    """ISO-8601 time now in ``arguments["timezone"]`` (IANA name, default UTC).

    Raises:
        ToolError: the time zone name is unknown.
    """
    name = arguments.get("timezone") or "UTC"
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ToolError(f"unknown time zone {name!r}; use an IANA name like 'Europe/Paris'") from exc
    return datetime.now(zone).isoformat(timespec="seconds")


def current_time_tool() -> Tool:
    """The ``current_time`` tool definition."""
    return Tool(
        name="current_time",
        description="Get the current date and time (ISO 8601). Optionally in an IANA time zone.",
        parameters={
            "type": "object",
            "properties": {
                "timezone": {"type": "string", "description": "IANA time zone, e.g. 'Asia/Shanghai'. Default UTC."}
            },
            "additionalProperties": False,
        },
        handler=current_time,
        timeout=5.0,
    )
