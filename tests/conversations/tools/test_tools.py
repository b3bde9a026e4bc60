"""Tool registry and built-in tools (pure; no database)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from datetime import UTC, datetime, timedelta

import pytest

from conversations.agent.tool_registry import (
    DEFAULT_MAX_CONCURRENT_CALLS,
    DEFAULT_RESULT_MAX_CHARS,
    PREVIEW_CHARS,
    BoundToolRegistry,
    Tool,
    ToolContext,
    ToolError,
    ToolFatalError,
    ToolOutcome,
    ToolRegistry,
    truncate_result,
)
from conversations.tools import default_registry
from conversations.tools.builtin import TIMEZONE_MAX_CHARS, current_time, current_time_tool
from providers.types import ToolCall


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
    assert definition.parameters["properties"]["timezone"]["maxLength"] == TIMEZONE_MAX_CHARS == 64


@pytest.mark.parametrize(
    "zone",
    [
        "x" * 5000,  # QA: the OS refused the file name (OSError) and the call took the crash path
        "Europe",  # a tzdata directory: IsADirectoryError
        "__init__.py",  # a tzdata file that is no zone: ValueError
        "Europe/../UTC",
        "a\x00b",
        "UTC/",
    ],
)
async def test_any_bad_time_zone_is_a_tool_error_never_a_crash(zone):
    with pytest.raises(ToolError) as raised:
        await current_time({"timezone": zone})

    assert str(raised.value).startswith("unknown time zone '")
    assert len(str(raised.value)) < 150


async def test_a_time_zone_longer_than_the_schema_allows_is_refused_before_the_tool_runs():
    outcome = await default_registry([]).run(call("current_time", {"timezone": "x" * 5000}))
    near = await default_registry([]).run(call("current_time", {"timezone": "Europe"}))

    assert outcome.is_error is True
    assert outcome.content.startswith("Error: invalid arguments for current_time: at $.timezone")
    assert "is too long" in outcome.content or "maxLength" in outcome.content
    assert (near.is_error, near.content) == (
        True,
        "Error: unknown time zone 'Europe'; use an IANA name like 'Europe/Paris'",
    )


def _unbounded(schema: dict, where: str = "$") -> list[str]:
    """Paths of the string and array schemas in ``schema`` without a length bound."""
    found: list[str] = []
    kind = schema.get("type")
    if kind == "string" and "maxLength" not in schema and "enum" not in schema:
        found.append(where)
    if kind == "array":
        if "maxItems" not in schema:
            found.append(where)
        found += _unbounded(schema.get("items") or {}, f"{where}[]")
    for name, sub in (schema.get("properties") or {}).items():
        found += _unbounded(sub, f"{where}.{name}")
    return found


def test_every_built_in_tool_bounds_its_string_and_array_arguments():
    definitions = {d.name: d.parameters for d in default_registry([]).definitions()}

    assert set(definitions) == {
        "current_time",
        "memory_save",
        "memory_search",
        "plan_update",
        "plan_get",
        "http_fetch",
    }
    assert {name: _unbounded(schema) for name, schema in definitions.items() if _unbounded(schema)} == {}


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
        ({"city": 42}, "at $.city: 42 is not of type 'string'"),
        ({"city": "Paris", "days": "3"}, "at $.days: '3' is not of type 'integer'"),
        ({"city": "Paris", "days": True}, "at $.days: True is not of type 'integer'"),
        (
            {"city": "Paris", "country": "FR"},
            "at $: Additional properties are not allowed ('country' was unexpected)",
        ),
        ({"days": 3}, "at $: 'city' is a required property"),
        ({"city": "Paris", "unit": "k"}, "at $.unit: 'k' is not one of ['c', 'f']"),
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


async def test_a_tools_own_longer_timeout_never_outlasts_the_configured_one():
    """QA: ``tool.timeout or timeout`` let a tool's 60 s beat ``PICOBOT_TOOL_TIMEOUT``; the README
    says a tool may only declare a *shorter* limit."""

    async def slow(arguments: dict) -> str:
        await asyncio.sleep(30)
        return "too late"

    registry = ToolRegistry([make_tool(slow, timeout=60)], default_timeout=60)
    async with asyncio.timeout(5):
        by_call = await registry.run(call("probe"), timeout=0.2)
        by_default = await ToolRegistry([make_tool(slow, timeout=60)], default_timeout=0.2).run(call("probe"))

    assert (by_call.is_error, by_call.content) == (True, "Error: probe timed out after 0.2 s")
    assert (by_default.is_error, by_default.content) == (True, "Error: probe timed out after 0.2 s")


def test_the_call_timeout_is_the_shorter_of_the_configured_and_the_tools_own():
    registry = ToolRegistry(default_timeout=30)
    own_short, own_long, none = make_tool(echo, timeout=5), make_tool(echo, timeout=60), make_tool(echo)

    assert registry.call_timeout(own_short) == 5
    assert registry.call_timeout(own_short, 2) == 2
    assert registry.call_timeout(own_long) == 30
    assert registry.call_timeout(own_long, 0.2) == 0.2
    assert registry.call_timeout(none) == 30 and registry.call_timeout(none, 7) == 7


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

    assert outcome.is_error is True
    assert re.fullmatch(r"Error: probe failed: KeyError \(ref [0-9a-f]{8}\)", outcome.content)
    assert "secret internal detail" not in outcome.content


async def test_a_crash_is_logged_once_redacted_on_one_line_under_the_results_ref(caplog, settings):
    """QA: the log held ``RuntimeError: boom with key sk-SECRET123 and password=hunter2`` raw, and
    a multi-line message could forge log lines."""
    settings.PICOBOT = settings.PICOBOT.replace(llm_api_key="configured-llm-key-4711")

    async def crash(arguments: dict) -> str:
        try:
            raise ValueError("upstream said token=abc123xyz with configured-llm-key-4711")
        except ValueError as exc:
            raise RuntimeError(
                "boom with key sk-SECRET1234567 and password=hunter2\n2026-01-01 ERROR forged: admin logged in\r"
            ) from exc

    with caplog.at_level(logging.INFO, logger="conversations.agent.tool_registry"):
        outcome = await ToolRegistry([make_tool(crash)]).run(call("probe"))

    ref = re.fullmatch(r"Error: probe failed: RuntimeError \(ref ([0-9a-f]{8})\)", outcome.content).group(1)
    records = [r for r in caplog.records if r.name == "conversations.agent.tool_registry"]
    assert len(records) == 1 and records[0].levelno == logging.ERROR
    assert records[0].exc_info is None  # no raw traceback appended by the handler
    logged = records[0].getMessage()
    assert logged.startswith(f"tool probe crashed (ref {ref}): Traceback (most recent call last):")
    assert "\n" not in logged and "\r" not in logged and "\\n2026-01-01 ERROR forged" in logged
    for secret in ("sk-SECRET1234567", "hunter2", "abc123xyz", "configured-llm-key-4711"):
        assert secret not in logged and secret not in caplog.text
    assert "password=[redacted]" in logged and "sk-[redacted]" in logged and "token=[redacted]" in logged
    assert "ValueError" in logged and "RuntimeError" in logged  # the cause chain and the frames stay


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


# --- jsonschema validation, result bounds, tool context -------------------------------------------


PLAN_LIKE = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {"text": {"type": "string"}, "status": {"enum": ["pending", "done"]}},
                "required": ["text", "status"],
            },
        }
    },
    "required": ["steps"],
}


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (
            {"steps": [{"text": "a", "status": "later"}]},
            "at $.steps[0].status: 'later' is not one of ['pending', 'done']",
        ),
        (
            {"steps": [{"text": "a", "status": "done"}, {"text": 1, "status": "done"}]},
            "at $.steps[1].text: 1 is not of type 'string'",
        ),
        ({"steps": [{"status": "done"}]}, "at $.steps[0]: 'text' is a required property"),
        ({"steps": [{"text": "a", "status": "done"}] * 3}, "at $.steps: [{'text': 'a', 'status': 'done'}"),
    ],
)
async def test_nested_invalid_arguments_name_the_failing_path(arguments, problem):
    outcome = await ToolRegistry([make_tool(echo, name="plan", parameters=PLAN_LIKE)]).run(
        call("plan", arguments)
    )

    assert outcome.is_error is True
    assert outcome.content.startswith(f"Error: invalid arguments for plan: {problem}")


async def test_a_huge_invalid_value_is_not_echoed_back_whole():
    outcome = await ToolRegistry([make_tool(echo, name="weather", parameters=STRICT)]).run(
        call("weather", {"city": "Paris", "days": "9" * 10_000})
    )

    assert (
        outcome.content
        == "Error: invalid arguments for weather: at $.days: the value breaks the schema rule 'type': \"integer\""
    )


def test_a_tool_with_an_invalid_schema_is_refused_at_registration():
    with pytest.raises(ValueError, match="tool 'broken': invalid parameters schema"):
        ToolRegistry(
            [
                make_tool(
                    echo, name="broken", parameters={"type": "object", "properties": {"x": {"type": "thing"}}}
                )
            ]
        )


async def test_a_long_result_is_cut_with_a_marker_saying_how_much():
    async def long(arguments: dict) -> str:
        return "z" * 250

    outcome = await ToolRegistry([make_tool(long)], max_result_chars=100).run(call("probe"))

    assert outcome.is_error is False
    assert (
        outcome.content
        == "z" * 100 + "\n[… truncated: 150 of 250 characters cut; the tool result limit is 100 characters]"
    )


async def test_long_error_messages_are_cut_too_and_short_results_are_untouched():
    async def refuse(arguments: dict) -> str:
        raise ToolError("no " * 100)

    registry = ToolRegistry([make_tool(refuse), make_tool(echo, name="short")], max_result_chars=50)

    refused = await registry.run(call("probe"))
    short = await registry.run(call("short", {"a": 1}))

    assert refused.is_error is True and refused.content.startswith("Error: no no")
    assert "[… truncated: 257 of 307 characters cut" in refused.content
    assert short.content == '{"a": 1}'


def test_truncate_result_bounds():
    assert truncate_result("abc", 3) == "abc"
    assert truncate_result("abcd", 0) == "abcd"
    assert truncate_result("abcd", 3).startswith("abc\n[… truncated: 1 of 4 characters cut")


def test_the_default_registry_takes_its_result_bound_from_the_settings(settings):
    assert default_registry([]).max_result_chars == DEFAULT_RESULT_MAX_CHARS == 16000
    settings.PICOBOT = settings.PICOBOT.replace(tool_result_max_chars=1234)
    assert default_registry([]).max_result_chars == 1234


CONTEXT = ToolContext(dialog_id="cli_chat:7:d1", channel="cli_chat", chat_id="7", owner_id=7)


def context_tool(name: str = "whoami") -> Tool:
    async def whoami(arguments: dict, context: ToolContext) -> str:
        return f"{context.dialog_id} {context.owner_id}"

    return Tool(name, "who", {"type": "object", "properties": {}}, whoami, needs_context=True)


async def test_a_bound_registry_passes_its_context_and_plain_tools_keep_working():
    registry = ToolRegistry([context_tool(), make_tool(echo)])
    bound = registry.bind(CONTEXT)

    assert isinstance(bound, BoundToolRegistry) and isinstance(bound, ToolRegistry)
    assert (await bound.run(call("whoami"))).content == "cli_chat:7:d1 7"
    assert (await bound.run(call("probe", {"x": 1}))).content == '{"x": 1}'
    other = ToolContext(dialog_id="other", owner_id=8)
    assert (await bound.run(call("whoami"), context=other)).content == "other 8"
    assert (await registry.run(call("whoami"), context=other)).content == "other 8"


async def test_a_context_tool_without_a_context_is_an_error_result():
    outcome = await ToolRegistry([context_tool()]).run(call("whoami"))

    assert (outcome.is_error, outcome.content) == (
        True,
        "Error: whoami is not available here (it needs a dialog)",
    )


def test_a_bound_registry_keeps_the_tools_it_was_bound_with_and_the_next_one_sees_new_ones():
    registry = ToolRegistry([make_tool(echo, name="a")])
    bound = registry.bind(CONTEXT)
    registry.register(make_tool(echo, name="b"))

    assert [d.name for d in bound.definitions()] == ["a"] and "b" not in bound
    assert [d.name for d in registry.bind(CONTEXT).definitions()] == ["a", "b"]


async def test_replace_tools_swaps_a_prefix_group_at_once_and_leaves_out_bad_schemas():
    registry = ToolRegistry([make_tool(echo, name="a"), make_tool(echo, name="srv__old")])
    running = registry.bind(CONTEXT)

    refused = registry.replace_tools(
        "srv__",
        [
            make_tool(echo, name="srv__new"),
            Tool("srv__broken", "bad", {"type": "no-such-type"}, echo),
            make_tool(echo, name="other"),
        ],
    )

    assert set(refused) == {"srv__broken", "other"} and "invalid parameters schema" in refused["srv__broken"]
    assert [d.name for d in registry.definitions()] == ["a", "srv__new"]
    assert (await registry.run(call("srv__old"))).is_error
    # The turn that was running keeps its view: its old tool still runs, the new one is unknown to it.
    assert not (await running.run(call("srv__old", {"x": 1}))).is_error
    assert "srv__new" not in running
    assert registry.replace_tools("srv__", []) == {} and [d.name for d in registry.definitions()] == ["a"]


async def test_the_calls_of_one_batch_run_concurrently_through_a_bound_registry():
    """The agent loop runs a response's calls as tasks; each call holds its own timeout."""
    entered = asyncio.Barrier(2)

    async def meet(arguments: dict, context: ToolContext) -> str:
        await entered.wait()
        return context.chat_id

    registry = ToolRegistry([Tool("meet", "meet", {"type": "object"}, meet, timeout=5, needs_context=True)])
    bound = registry.bind(CONTEXT)
    async with asyncio.timeout(5):
        outcomes = await asyncio.gather(
            bound.run(call("meet", call_id="a")), bound.run(call("meet", call_id="b"))
        )

    assert [o.content for o in outcomes] == ["7", "7"]


# --- concurrency bound (PICOBOT_MAX_TOOL_CALLS) ---------------------------------------------------


async def test_a_bound_registry_runs_at_most_max_concurrent_calls_at_once():
    """QA: 400 calls of one response all ran at once; now they run ``max_concurrent_calls`` at a time."""
    running = peak = 0

    async def busy(arguments: dict) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        for _ in range(5):
            await asyncio.sleep(0)
        running -= 1
        return "done"

    registry = ToolRegistry([make_tool(busy, timeout=5)], max_concurrent_calls=4)
    bound = registry.bind(CONTEXT)
    async with asyncio.timeout(10):
        outcomes = await asyncio.gather(*(bound.run(call("probe", call_id=f"c{i}")) for i in range(40)))

    assert [o.content for o in outcomes] == ["done"] * 40
    assert peak == 4


async def test_each_turn_has_its_own_slots():
    entered = asyncio.Barrier(2)

    async def meet(arguments: dict) -> str:
        await entered.wait()  # never returns if the two turns shared one slot
        return "met"

    registry = ToolRegistry([make_tool(meet, timeout=5)], max_concurrent_calls=1)
    first, second = registry.bind(CONTEXT), registry.bind(CONTEXT)
    async with asyncio.timeout(5):
        outcomes = await asyncio.gather(first.run(call("probe")), second.run(call("probe")))

    assert [o.content for o in outcomes] == ["met", "met"]


async def test_a_call_waiting_for_a_slot_starts_its_time_limit_only_when_it_runs():
    release = asyncio.Event()

    async def hold(arguments: dict) -> str:
        await release.wait()
        return "held"

    async def quick(arguments: dict) -> str:
        return "quick"

    registry = ToolRegistry(
        [make_tool(hold, name="hold", timeout=5), make_tool(quick, name="quick", timeout=0.2)],
        max_concurrent_calls=1,
    )
    bound = registry.bind(CONTEXT)
    async with asyncio.timeout(5):
        first = asyncio.ensure_future(bound.run(call("hold")))
        second = asyncio.ensure_future(bound.run(call("quick")))
        await asyncio.sleep(0.4)  # "quick" waits twice its own limit for the slot
        assert not second.done()
        release.set()
        outcomes = [await first, await second]

    assert [(o.is_error, o.content) for o in outcomes] == [(False, "held"), (False, "quick")]


def test_the_default_registry_takes_its_concurrency_bound_from_the_settings(settings):
    assert default_registry([]).max_concurrent_calls == DEFAULT_MAX_CONCURRENT_CALLS == 16
    settings.PICOBOT = settings.PICOBOT.replace(max_tool_calls=3)
    registry = default_registry([])
    assert registry.max_concurrent_calls == 3 and registry.bind(CONTEXT).max_concurrent_calls == 3
