"""Agent tools: the registry (validation, timeouts, error results) and the built-in tools."""

from __future__ import annotations

from conversations.tools.builtin import current_time_tool
from conversations.tools.registry import Tool, ToolOutcome, ToolRegistry


def default_registry() -> ToolRegistry:
    """The registry with PicoBot's built-in tools."""
    return ToolRegistry([current_time_tool()])


__all__ = ["Tool", "ToolOutcome", "ToolRegistry", "default_registry"]
