"""Deeply nested tool call arguments are an error result, never a RecursionError (QA 6, item 2).

A runaway or hostile model response may nest its arguments thousands of levels deep. Parsing,
showing (``copy.deepcopy``), scrubbing and estimating them recursed, so the turn failed "could not
be saved" or "Internal error". Now arguments deeper than ``json_depth.MAX_JSON_DEPTH`` are
invalid arguments: the model reads an error result, the tool block shows ``{}``, the turn commits,
and the stored raw text goes back to the model in later requests.
"""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async

from conversations.agent.tool_registry import Tool, ToolRegistry
from conversations.context.tokens import estimate_block
from conversations.models import Message
from conversations.runtime.sessions import reset_session_manager
from conversations.storage.shapes import scrub_text
from delivery.turn import shown_arguments
from providers.blocks import ToolUseBlock
from providers.chunks import Done, ToolCallArgumentsDelta, ToolCallStart
from providers.json_depth import MAX_JSON_DEPTH
from providers.openai_compat import OpenAICompatProvider
from providers.testing import (
    LocalSSEServer,
    ScriptedProvider,
    SSEResponse,
    openai_events,
    script_text,
    split_events,
    sse_body,
)
from tests.conversations.storage.test_lone_surrogates import finished, start

ANY_OBJECT = {"type": "object", "properties": {}}


def deep_arguments(depth: int) -> str:
    return '{"a": ' + "[" * depth + "]" * depth + "}"


def deeply_nested(depth: int) -> dict:
    value: dict = {"leaf": "x"}
    for _ in range(depth):
        value = {"a": value}
    return value


@database_sync_to_async
def rows() -> list[Message]:
    return list(Message.objects.order_by("dialog_id", "seq"))


@pytest.fixture(autouse=True)
def no_auto_titles(settings):
    settings.PICOBOT = settings.PICOBOT.replace(auto_title_after=0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("depth", [65, 300, 900, 5000])
async def test_deeply_nested_arguments_are_an_error_result_and_the_turn_commits(connect, start_worker, depth):
    ran: list[dict] = []

    async def ok(arguments: dict) -> str:
        ran.append(arguments)
        return "fine"

    arguments = deep_arguments(depth)
    provider = ScriptedProvider(
        [
            [ToolCallStart(0, "c1", "ok"), ToolCallArgumentsDelta(0, arguments), Done("tool_calls")],
            script_text("answer"),
        ]
    )
    client = await start(
        connect, start_worker, provider, tools=ToolRegistry([Tool("ok", "ok", ANY_OBJECT, ok)])
    )
    turn = await finished(client)

    assert turn["status"] == "completed", turn["error"]
    tool_block = next(b for b in turn["blocks"] if b["type"] == "tool")
    assert (tool_block["arguments"], tool_block["status"]) == ({}, "failed")
    assert ran == []
    stored = await rows()
    assert [r.role for r in stored] == ["user", "assistant", "tool", "assistant"]
    assistant, result = stored[1], stored[2]
    assert assistant.tool_calls == [{"id": "c1", "name": "ok", "arguments": {}, "raw_arguments": arguments}]
    assert result.is_error is True
    assert f"nest deeper than {MAX_JSON_DEPTH} levels" in result.content


@pytest.mark.django_db(transaction=True)
async def test_the_stored_raw_arguments_go_back_to_the_model_after_the_history_is_read_again(
    connect, start_worker
):
    arguments = deep_arguments(5000)
    responses = [
        SSEResponse(pieces=split_events(sse_body(openai_events(tool_calls=[("c1", "ok", arguments)])))),
        SSEResponse(pieces=split_events(sse_body(openai_events("answer")))),
        SSEResponse(pieces=split_events(sse_body(openai_events("second")))),
    ]

    async def ok(arguments: dict) -> str:
        return "fine"

    async with LocalSSEServer(responses) as server:
        provider = OpenAICompatProvider(server.base_url, "sk-test", "test-model", max_retries=0)
        tools = ToolRegistry([Tool("ok", "ok", ANY_OBJECT, ok)])
        client = await start(connect, start_worker, provider, tools=tools)
        first = await finished(client)
        reset_session_manager()  # the next turn reads the dialog's history from the database
        await client.send({"type": "message", "content": "again", "client_msg_id": "m-2"})
        second = await finished(client, after=first["id"])

    assert (first["status"], second["status"]) == ("completed", "completed"), (
        first["error"],
        second["error"],
    )
    replayed = [m for m in server.requests[2]["messages"] if m.get("tool_calls")]
    assert [c["function"]["arguments"] for c in replayed[0]["tool_calls"]] == [arguments]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5000])
def test_a_too_deep_value_shows_as_empty_arguments(depth):
    assert shown_arguments(deeply_nested(depth)) == {}
    assert shown_arguments(deeply_nested(3)) == deeply_nested(3)


def test_storage_scrubbing_and_token_estimates_walk_deep_values_without_recursion():
    deep = deeply_nested(20_000)

    scrubbed = scrub_text(deep)
    tokens = estimate_block(ToolUseBlock("c1", "ok", deep))

    for _ in range(20_000):
        scrubbed = scrubbed["a"]
    assert scrubbed == {"leaf": "x"}
    assert tokens > estimate_block(ToolUseBlock("c1", "ok", {}))
    assert json.dumps(scrub_text({"k": ["\x00"]})) == '{"k": ["\\ufffd"]}'
