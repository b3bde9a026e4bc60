"""Tool registry: JSON-schema definitions, argument checks, timeouts, error results (DESIGN §6).

Pure: no Django. A call the registry cannot run (unknown tool, invalid JSON or arguments, timeout,
the tool's own recoverable error) becomes an ``is_error`` outcome the model reads; only a
``ToolFatalError`` ends the turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from providers.base import ToolArgumentsError, ToolCall
from providers.messages import ToolDefinition

log = logging.getLogger(__name__)

PREVIEW_CHARS = 200
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


class ToolError(Exception):
    """A recoverable tool failure: its message goes back to the model as an error result."""


class ToolFatalError(Exception):
    """A failure that must end the turn (the registry re-raises it)."""


@dataclass(frozen=True)
class Tool:
    """A tool the model may call. ``handler(arguments) -> str`` is awaited with ``timeout`` s."""

    name: str
    description: str
    parameters: dict
    handler: Callable[[dict], Awaitable[str]]
    timeout: float | None = None

    def definition(self) -> ToolDefinition:
        """The provider-neutral definition sent to the model."""
        return ToolDefinition(name=self.name, description=self.description, parameters=self.parameters)


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call produced: ``content`` for the model, ``preview`` for the turn block."""

    content: str
    is_error: bool
    preview: str


def validate_arguments(schema: dict, arguments: Any) -> str | None:
    """Check ``arguments`` against an object schema (required keys, property types, extras).

    Returns an error message, or None when valid. Covers the subset of JSON Schema the built-in
    tools use (type, required, properties, additionalProperties false, enum).
    """
    if not isinstance(arguments, dict):
        return "arguments must be a JSON object"
    for name in schema.get("required", []):
        if name not in arguments:
            return f"missing required argument {name!r}"
    props = schema.get("properties", {})
    for name, value in arguments.items():
        spec = props.get(name)
        if spec is None:
            if schema.get("additionalProperties") is False:
                return f"unknown argument {name!r}"
            continue
        expected = spec.get("type")
        if expected:
            kinds = _JSON_TYPES.get(expected, (object,))
            if not isinstance(value, kinds) or (expected in {"integer", "number"} and isinstance(value, bool)):
                return f"argument {name!r} must be of type {expected}"
        if "enum" in spec and value not in spec["enum"]:
            return f"argument {name!r} must be one of {spec['enum']}"
    return None


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


class ToolRegistry:
    """The tools of an agent, by name."""

    def __init__(self, tools: list[Tool] | None = None, *, default_timeout: float = 30.0) -> None:
        self._tools = {t.name: t for t in tools or []}
        self.default_timeout = default_timeout

    def register(self, tool: Tool) -> None:
        """Add or replace a tool."""
        self._tools[tool.name] = tool

    def definitions(self) -> list[ToolDefinition]:
        """Definitions of every tool, in registration order."""
        return [t.definition() for t in self._tools.values()]

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    async def run(self, call: ToolCall, timeout: float | None = None) -> ToolOutcome:
        """Run one call; every recoverable failure becomes an error outcome.

        Raises:
            ToolFatalError: the tool said the turn cannot go on.
        """
        tool = self._tools.get(call.name)
        if tool is None:
            return self._error(f"unknown tool {call.name!r}; available: {', '.join(self._tools) or 'none'}")
        try:
            arguments = call.arguments()
        except ToolArgumentsError as exc:
            return self._error(f"invalid arguments JSON for {call.name}: {exc}")
        problem = validate_arguments(tool.parameters, arguments)
        if problem:
            return self._error(f"invalid arguments for {call.name}: {problem}")
        limit = tool.timeout or timeout or self.default_timeout
        try:
            async with asyncio.timeout(limit):
                content = await tool.handler(arguments)
        except TimeoutError:
            return self._error(f"{call.name} timed out after {limit:g} s")
        except ToolFatalError:
            raise
        except ToolError as exc:
            return self._error(str(exc))
        except Exception as exc:  # a bug in one tool must not kill the turn
            log.exception("tool %s crashed", call.name)
            return self._error(f"{call.name} failed: {type(exc).__name__}")
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        return ToolOutcome(content=content, is_error=False, preview=_preview(content))

    @staticmethod
    def _error(message: str) -> ToolOutcome:
        return ToolOutcome(content=f"Error: {message}", is_error=True, preview=_preview(message))
