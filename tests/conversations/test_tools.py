"""Tool registry and built-in tools (pure; no database)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from conversations.tools import default_registry
from conversations.tools.builtin import current_time_tool
from conversations.tools.registry import (
    PREVIEW_CHARS,
    Tool,
    ToolError,
    ToolFatalError,
    ToolOutcome,
    ToolRegistry,
)
from providers.base import ToolCall


def call(name: str, arguments: dict | str = "{}", call_id: str = "call_1") -> ToolCall:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=call_id, name=name, arguments_json=raw)


def make_tool(
    handler, *, name: str = "probe", parameters: dict | None = None, timeout: float | None = None
) -> Tool:
    return Tool(
        name=name,
        description="test tool",
        parameters=parameters or {"type": "object", "properties": {}},
        handler=handler,
        timeout=timeout,
    )


async def echo(arguments: dict) -> str:
    return json.dumps(arguments, sort_keys=True)


STRICT = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["c", "f"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}


# --- current_time ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "offset"),
    [
        ("Asia/Shanghai", timedelta(hours=8)),
        ("Asia/Kolkata", timedelta(hours=5, minutes=30)),
        ("UTC", timedelta(0)),
    ],
)
async def test_current_time_is_iso_8601_in_the_requested_zone(zone, offset):
    outcome = await default_registry().run(call("current_time", {"timezone": zone}))

    assert outcome.is_error is False
    parsed = datetime.fromisoformat(outcome.content)
    assert parsed.utcoffset() == offset
    assert abs(parsed - datetime.now(UTC)) < timedelta(seconds=5)


async def test_current_time_defaults_to_utc():
    outcome = await default_registry().run(call("current_time", {}))

    assert outcome.is_error is False
    assert outcome.content.endswith("+00:00")
    assert datetime.fromisoformat(outcome.content).utcoffset() == timedelta(0)


async def test_current_time_with_empty_arguments_text_defaults_to_utc():
    outcome = await default_registry().run(call("current_time", ""))

    assert outcome.content.endswith("+00:00")


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../../etc/passwd"])
async def test_an_unknown_time_zone_is_an_error_result_naming_the_zone(zone):
    outcome = await default_registry().run(call("current_time", {"timezone": zone}))

    assert outcome.is_error is True
    assert outcome.content.startswith("Error: unknown time zone")
    assert repr(zone) in outcome.content


def test_current_time_offers_a_strict_schema_to_the_model():
    definition = current_time_tool().definition()

    assert definition.name == "current_time"
    assert definition.parameters["additionalProperties"] is False
    assert list(definition.parameters["properties"]) == ["timezone"]


# --- registry: calls it cannot run ----------------------------------------------------------------


async def test_an_unknown_tool_is_an_error_result_listing_the_available_tools():
    registry = ToolRegistry([make_tool(echo, name="alpha"), make_tool(echo, name="beta")])

    outcome = await registry.run(call("gamma"))

    assert outcome == ToolOutcome(
        content="Error: unknown tool 'gamma'; available: alpha, beta",
        is_error=True,
        preview="unknown tool 'gamma'; available: alpha, beta",
    )


async def test_an_unknown_tool_in_an_empty_registry_says_none_are_available():
    outcome = await ToolRegistry().run(call("gamma"))

    assert outcome.content == "Error: unknown tool 'gamma'; available: none"


@pytest.mark.parametrize("raw", ['{"city": ', "[1, 2]", '{"x": NaN}', "not json"])
async def test_arguments_that_are_not_a_json_object_are_an_error_result(raw):
    ran: list[dict] = []

    async def handler(arguments: dict) -> str:
        ran.append(arguments)
        return "ran"

    outcome = await ToolRegistry([make_tool(handler)]).run(call("probe", raw))

    assert outcome.is_error is True
    assert outcome.content.startswith("Error: invalid arguments JSON for probe:")
    assert ran == []


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"city": 42}, "argument 'city' must be of type string"),
        ({"city": "Paris", "days": "3"}, "argument 'days' must be of type integer"),
        ({"city": "Paris", "days": True}, "argument 'days' must be of type integer"),
        ({"city": "Paris", "country": "FR"}, "unknown argument 'country'"),
        ({"days": 3}, "missing required argument 'city'"),
        ({"city": "Paris", "unit": "k"}, "argument 'unit' must be one of ['c', 'f']"),
    ],
)
async def test_schema_invalid_arguments_are_an_error_result_and_the_tool_does_not_run(arguments, problem):
    ran: list[dict] = []

    async def handler(args: dict) -> str:
        ran.append(args)
        return "ran"

    outcome = await ToolRegistry([make_tool(handler, name="weather", parameters=STRICT)]).run(
        call("weather", arguments)
    )

    assert (outcome.is_error, outcome.content) == (True, f"Error: invalid arguments for weather: {problem}")
    assert ran == []


async def test_schema_valid_arguments_reach_the_tool():
    registry = ToolRegistry([make_tool(echo, name="weather", parameters=STRICT)])

    outcome = await registry.run(call("weather", {"city": "Paris", "days": 3, "unit": "c"}))

    assert outcome == ToolOutcome(
        '{"city": "Paris", "days": 3, "unit": "c"}', False, '{"city": "Paris", "days": 3, "unit": "c"}'
    )


async def test_extra_arguments_are_allowed_when_the_schema_does_not_forbid_them():
    outcome = await ToolRegistry([make_tool(echo)]).run(call("probe", {"anything": 1}))

    assert (outcome.is_error, outcome.content) == (False, '{"anything": 1}')


# --- registry: tools that misbehave ---------------------------------------------------------------


async def test_a_slow_tool_hits_its_timeout_and_becomes_an_error_result():
    cancelled = asyncio.Event()

    async def slow(arguments: dict) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "too late"

    async with asyncio.timeout(5):
        outcome = await ToolRegistry([make_tool(slow, timeout=0.05)]).run(call("probe"))

    assert (outcome.is_error, outcome.content) == (True, "Error: probe timed out after 0.05 s")
    assert cancelled.is_set()


async def test_the_call_timeout_applies_when_the_tool_has_none_of_its_own():
    async def slow(arguments: dict) -> str:
        await asyncio.sleep(30)
        return "too late"

    async with asyncio.timeout(5):
        outcome = await ToolRegistry([make_tool(slow)], default_timeout=60).run(call("probe"), timeout=0.05)

    assert outcome.content == "Error: probe timed out after 0.05 s"


async def test_a_crashing_tool_becomes_an_error_result_instead_of_raising():
    async def crash(arguments: dict) -> str:
        raise KeyError("secret internal detail")

    outcome = await ToolRegistry([make_tool(crash)]).run(call("probe"))

    assert (outcome.is_error, outcome.content) == (True, "Error: probe failed: KeyError")
    assert "secret internal detail" not in outcome.content


async def test_a_tool_error_message_goes_back_to_the_model():
    async def refuse(arguments: dict) -> str:
        raise ToolError("the city is not supported")

    outcome = await ToolRegistry([make_tool(refuse)]).run(call("probe"))

    assert outcome == ToolOutcome("Error: the city is not supported", True, "the city is not supported")


async def test_a_fatal_tool_error_propagates():
    async def fatal(arguments: dict) -> str:
        raise ToolFatalError("the turn cannot go on")

    with pytest.raises(ToolFatalError, match="the turn cannot go on"):
        await ToolRegistry([make_tool(fatal)]).run(call("probe"))


async def test_a_non_string_result_is_sent_as_json():
    async def structured(arguments: dict) -> str:
        return {"temp": 21, "sky": "晴"}  # type: ignore[return-value]

    outcome = await ToolRegistry([make_tool(structured)]).run(call("probe"))

    assert outcome.content == '{"temp": 21, "sky": "晴"}'


# --- previews -------------------------------------------------------------------------------------


async def test_a_long_result_keeps_its_full_content_but_gets_a_truncated_preview():
    text = "x" * (PREVIEW_CHARS + 50)

    async def long(arguments: dict) -> str:
        return text

    outcome = await ToolRegistry([make_tool(long)]).run(call("probe"))

    assert outcome.content == text
    assert outcome.preview == "x" * (PREVIEW_CHARS - 1) + "…"
    assert len(outcome.preview) == PREVIEW_CHARS


async def test_a_result_of_exactly_the_preview_length_is_not_truncated():
    text = "y" * PREVIEW_CHARS

    async def exact(arguments: dict) -> str:
        return text

    outcome = await ToolRegistry([make_tool(exact)]).run(call("probe"))

    assert outcome.preview == text


def test_definitions_are_listed_in_registration_order_and_register_replaces_by_name():
    registry = ToolRegistry([make_tool(echo, name="b"), make_tool(echo, name="a")])
    registry.register(make_tool(echo, name="c"))
    registry.register(Tool("b", "replaced", {"type": "object"}, echo))

    assert [(d.name, d.description) for d in registry.definitions()] == [
        ("b", "replaced"),
        ("a", "test tool"),
        ("c", "test tool"),
    ]
    assert "a" in registry and "zz" not in registry
