"""Large tool arguments are bounded, parsed once and validated cheaply (QA 6b, B4).

``memory_save`` with 300 000 tags (900 KB) held the event loop for 4.8 s, a 3.4 MB
``plan_update`` for 5.7 s: the argument text had no size bound, it was parsed three times (the
tool block, the registry, the history message), and ``jsonschema`` looked at every array item
before it reported ``maxItems``. These tests count parses and validator calls instead of timing.
A live snapshot shows arguments over its bound as ``{"_truncated": …}``; the history keeps them.
"""

from __future__ import annotations

import json
import threading

import pytest
from channels.db import database_sync_to_async

from conversations.agent import tool_arguments as arguments_module
from conversations.agent import tool_registry as registry_module
from conversations.agent.loop import AgentLoop
from conversations.agent.tool_arguments import quick_limits, validate_arguments
from conversations.agent.tool_registry import (
    DEFAULT_MAX_ARGUMENT_BYTES,
    VALIDATE_OFF_LOOP_BYTES,
    Tool,
    ToolRegistry,
)
from conversations.models import Message as MessageRow
from conversations.tools import default_registry
from delivery.events import ToolStarted
from providers.blocks import ToolUseBlock
from providers.chunks import Done, ToolCallArgumentsDelta, ToolCallStart
from providers.messages import Message
from providers.testing import ScriptedProvider, script_text
from providers.types import ToolCall
from tests.conversations.storage.test_lone_surrogates import finished, start

ANY_OBJECT = {"type": "object", "properties": {}}
TAGGED = {
    "type": "object",
    "properties": {
        "content": {"type": "string", "maxLength": 100},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 8},
    },
}


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """Every parse of a tool call's argument text, by call id."""
    seen: list[str] = []
    original = ToolCall._parse

    def counting(self: ToolCall):
        seen.append(self.id)
        return original(self)

    monkeypatch.setattr(ToolCall, "_parse", counting)
    return seen


async def echo(arguments: dict) -> str:
    return "ok"


def streamed(name: str, text: str, call_id: str = "c1") -> list:
    """One response calling ``name`` with ``text`` streamed in 4 KiB deltas."""
    pieces = [text[i : i + 4096] for i in range(0, len(text), 4096)]
    return [
        ToolCallStart(0, call_id, name),
        *(ToolCallArgumentsDelta(0, p) for p in pieces),
        Done("tool_calls"),
    ]


async def test_arguments_over_the_cap_get_an_error_result_without_being_parsed(parses):
    registry = ToolRegistry([Tool("probe", "probe", ANY_OBJECT, echo)], max_argument_bytes=1000)
    text = json.dumps({"x": "é" * 600})  # 600 characters, 1200+ bytes

    outcome = await registry.run(ToolCall("c1", "probe", text))

    size = len(text.encode())
    assert (outcome.is_error, outcome.content) == (
        True,
        f"Error: probe arguments too large ({size} bytes; at most 1000)",
    )
    assert parses == []


def test_the_cap_comes_from_the_settings(settings):
    assert default_registry([]).max_argument_bytes == DEFAULT_MAX_ARGUMENT_BYTES == 256 * 1024
    settings.PICOBOT = settings.PICOBOT.replace(max_tool_argument_bytes=5000)
    registry = default_registry([])
    assert registry.max_argument_bytes == 5000
    assert registry.bind(registry_module.ToolContext("cli_chat:u:d")).max_argument_bytes == 5000


async def test_an_array_over_its_max_items_is_refused_before_jsonschema_sees_its_items(monkeypatch):
    def no_full_validation(errors):
        raise AssertionError("jsonschema validated the whole value")

    monkeypatch.setattr(arguments_module, "best_match", no_full_validation)
    registry = ToolRegistry([Tool("save", "save", TAGGED, echo)], max_argument_bytes=10_000_000)

    outcome = await registry.run(ToolCall("c1", "save", json.dumps({"content": "x", "tags": [1] * 300_000})))

    assert outcome.is_error is True
    assert (
        outcome.content
        == "Error: invalid arguments for save: at $.tags: the value breaks the schema rule 'maxItems': 8"
    )


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"content": "x" * 101}, "at $.content: the value breaks the schema rule 'maxLength': 100"),
        ({"tags": ["a", "toolong"]}, "at $.tags[1]: 'toolong' is too long"),
        ({"tags": ["a"] * 9}, "at $.tags: ['a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'] is too long"),
        ({"content": "fine", "tags": ["a", 1]}, None),  # not a length problem: jsonschema's to find
    ],
)
def test_quick_limits_name_the_first_length_problem_as_jsonschema_words_it(arguments, problem):
    assert quick_limits(TAGGED, arguments) == problem
    if problem is not None:
        assert validate_arguments(TAGGED, arguments) == problem


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        # ``items`` covers only the items after ``prefixItems``.
        ({"prefixItems": [{"type": "string"}], "items": {"maxLength": 1}}, ["long prefix", "a"]),
        # ``additionalProperties`` does not apply to keys a pattern matches.
        ({"patternProperties": {"^x": {}}, "additionalProperties": {"maxLength": 1}}, {"xy": "long"}),
        # Subschemas under ``anyOf`` may not apply: left to jsonschema.
        ({"anyOf": [{"maxLength": 1}, {"type": "string"}]}, "long"),
    ],
)
def test_quick_limits_only_report_what_certainly_applies(schema, value):
    assert quick_limits(schema, value) is None
    assert validate_arguments({"type": "object", "properties": {"v": schema}}, {"v": value}) is None


async def test_large_arguments_are_validated_off_the_event_loop(monkeypatch):
    threads: list[int] = []
    original = registry_module.validate_arguments

    def recording(validator, arguments):
        threads.append(threading.get_ident())
        return original(validator, arguments)

    monkeypatch.setattr(registry_module, "validate_arguments", recording)
    registry = ToolRegistry([Tool("probe", "probe", ANY_OBJECT, echo)])
    small = json.dumps({"x": "y"})
    large = json.dumps({"x": "y" * VALIDATE_OFF_LOOP_BYTES})

    assert not (await registry.run(ToolCall("c1", "probe", small))).is_error
    assert not (await registry.run(ToolCall("c2", "probe", large))).is_error

    assert threads[0] == threading.get_ident()
    assert threads[1] != threading.get_ident()


async def test_each_call_is_parsed_once_for_its_block_its_run_and_its_history(parses):
    text = json.dumps({"q": "x" * 20_000})
    provider = ScriptedProvider(
        [
            [
                ToolCallStart(0, "c1", "probe"),
                ToolCallArgumentsDelta(0, text),
                ToolCallStart(1, "c2", "probe"),
                ToolCallArgumentsDelta(1, '{"q": "small"}'),
                Done("tool_calls"),
            ],
            script_text("done"),
        ]
    )
    events: list = []
    loop = AgentLoop(provider, ToolRegistry([Tool("probe", "probe", ANY_OBJECT, echo)]), events.append)

    result = await loop.run([Message.system("s"), Message.user("u")])

    assert result.final_text == "done"
    assert sorted(parses) == ["c1", "c2"]
    started = [e for e in events if isinstance(e, ToolStarted)]
    assert [e.arguments for e in started] == [{"q": "x" * 20_000}, {"q": "small"}]


async def test_a_handler_that_changes_its_arguments_does_not_change_the_history():
    async def pops(arguments: dict) -> str:
        arguments.pop("q")
        return "popped"

    provider = ScriptedProvider([streamed("pops", '{"q": "kept"}'), script_text("done")])
    loop = AgentLoop(provider, ToolRegistry([Tool("pops", "pops", ANY_OBJECT, pops)]), lambda event: None)

    result = await loop.run([Message.system("s"), Message.user("u")])

    assert result.messages[0].message.tool_calls == [ToolUseBlock("c1", "pops", {"q": "kept"})]


@database_sync_to_async
def stored() -> list[tuple]:
    return [
        (r.role, r.content, r.tool_calls, r.is_error) for r in MessageRow.objects.order_by("dialog_id", "seq")
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("memory_save", {"content": "x", "tags": [1] * 300_000}),  # 900 KB
        ("plan_update", {"steps": [{"text": "x", "status": "bogus"}] * 100_000}),  # 3.4 MB
    ],
)
async def test_a_huge_call_gets_an_error_result_a_bounded_block_and_empty_history_arguments(
    connect, start_worker, parses, name, arguments
):
    text = json.dumps(arguments)
    size = len(text.encode())
    provider = ScriptedProvider([streamed(name, text), script_text("answer")])
    client = await start(connect, start_worker, provider, tools=default_registry([]))

    turn = await finished(client)

    assert turn["status"] == "completed", turn["error"]
    shown = [
        b["arguments"]
        for f in client.of_type("turn_updated")
        for b in f["turn"]["blocks"]
        if b["type"] == "tool"
    ]
    assert shown and all(a == {"_truncated": f"{size} bytes"} for a in shown)
    rows = await stored()
    assert [r[0] for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[1][2][0]["arguments"] == {}
    assert (rows[2][1], rows[2][3]) == (
        f"Error: {name} arguments too large ({size} bytes; at most 262144)",
        True,
    )
    assert parses == [], "the huge text was never parsed"
    sent = provider.requests[1].messages
    assert sent[-2].tool_calls == [ToolUseBlock("c1", name, {})], "nor sent back to the model"


@pytest.mark.django_db(transaction=True)
async def test_history_keeps_large_arguments_that_the_snapshot_bounds(connect, start_worker):
    big = json.dumps({"query": "q" * 20_000})

    async def search(arguments: dict) -> str:
        return "nothing found"

    provider = ScriptedProvider(
        [
            [ToolCallStart(0, "c1", "search"), ToolCallArgumentsDelta(0, big), Done("tool_calls")],
            script_text("No luck."),
        ]
    )
    tools = ToolRegistry([Tool("search", "search", {"type": "object"}, search)])
    client = await start(connect, start_worker, provider, tools=tools)
    turn = await finished(client)
    assert turn["status"] == "completed"
    size = len(json.dumps(json.loads(big), ensure_ascii=False, separators=(",", ":")).encode())
    shown = [
        b["arguments"]
        for f in client.of_type("turn_updated")
        for b in f["turn"]["blocks"]
        if b["type"] == "tool"
    ]
    assert shown and all(arguments == {"_truncated": f"{size} bytes"} for arguments in shown)
    committed = await client.until("turn_committed")
    assert committed["messages"][1]["tool_calls"][0]["arguments"] == json.loads(big), "history keeps them"
