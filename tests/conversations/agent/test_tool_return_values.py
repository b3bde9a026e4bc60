"""A tool whose return value is not JSON gets an error result, and the turn goes on (QA 6b, B3).

``json.dumps`` of the value sat outside the registry's error handling: a set, a cycle or a value
nested too deep to encode (``RecursionError``) failed the whole turn with "Internal error".
"""

from __future__ import annotations

import math

import pytest
from channels.db import database_sync_to_async

from conversations.agent.tool_registry import Tool, ToolRegistry
from conversations.models import Message as MessageRow
from providers.chunks import Done, ToolCallArgumentsDelta, ToolCallStart
from providers.testing import ScriptedProvider, script_text
from providers.types import ToolCall
from tests.conversations.storage.test_lone_surrogates import finished, start

ANY_OBJECT = {"type": "object", "properties": {}}


def deeply_nested() -> dict:
    value: list = []
    for _ in range(5000):
        value = [value]
    return {"x": value}


def cyclic() -> dict:
    value: dict = {}
    value["self"] = value
    return value


def handler_returning(value_of):
    async def handler(arguments: dict):
        return value_of()

    return handler


@pytest.mark.parametrize(
    ("value_of", "reason"),
    [
        pytest.param(lambda: {1, 2}, "TypeError: Object of type set is not JSON serializable", id="set"),
        pytest.param(deeply_nested, "RecursionError", id="too-deep"),
        pytest.param(cyclic, "ValueError: Circular reference detected", id="cycle"),
        pytest.param(
            lambda: {"x": math.nan}, "ValueError: Out of range float values are not JSON compliant", id="nan"
        ),
        pytest.param(
            lambda: [object()], "TypeError: Object of type object is not JSON serializable", id="object"
        ),
    ],
)
async def test_a_value_that_is_not_json_becomes_an_error_result(value_of, reason):
    registry = ToolRegistry([Tool("probe", "probe", ANY_OBJECT, handler_returning(value_of))])

    outcome = await registry.run(ToolCall("c1", "probe", "{}"))

    assert outcome.is_error is True
    assert outcome.content.startswith(f"Error: probe returned a value that is not JSON ({reason}")
    assert outcome.content.endswith(")") and len(outcome.content) < 300


async def test_json_values_that_are_not_strings_are_still_sent_as_json():
    registry = ToolRegistry([Tool("probe", "probe", ANY_OBJECT, handler_returning(lambda: {"a": [1, "é"]}))])

    outcome = await registry.run(ToolCall("c1", "probe", "{}"))

    assert (outcome.is_error, outcome.content) == (False, '{"a": [1, "é"]}')


@database_sync_to_async
def stored() -> list[tuple]:
    return [(r.role, r.content, r.is_error) for r in MessageRow.objects.order_by("dialog_id", "seq")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("value_of", [lambda: {1, 2}, deeply_nested], ids=["set", "too-deep"])
async def test_the_turn_goes_on_after_a_tool_returned_a_value_that_is_not_json(
    connect, start_worker, value_of
):
    provider = ScriptedProvider(
        [
            [ToolCallStart(0, "c1", "probe"), ToolCallArgumentsDelta(0, "{}"), Done("tool_calls")],
            script_text("answer"),
        ]
    )
    tools = ToolRegistry([Tool("probe", "probe", ANY_OBJECT, handler_returning(value_of))])
    client = await start(connect, start_worker, provider, tools=tools)

    turn = await finished(client)

    assert turn["status"] == "completed", turn["error"]
    rows = await stored()
    assert [r[0] for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[2][1].startswith("Error: probe returned a value that is not JSON (") and rows[2][2] is True
    assert rows[3][1] == "answer"
    assert provider.requests[1].messages[-1].content[0].content == rows[2][1]
