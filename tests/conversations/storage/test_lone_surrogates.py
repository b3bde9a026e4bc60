"""Lone UTF-16 surrogates from a model, a tool or a user never fail a turn (QA 6, item 1).

A server that splits an emoji's escaped surrogate pair across two SSE events makes ``json.loads``
yield two lone halves; a model may write a lone ``\\ud800`` into a tool argument or a plan step.
Such text could be neither stored nor sent: the turn failed "could not be saved", and a plan step
failed every later request of the dialog. Now split pairs are rejoined and lone halves stored as
U+FFFD, and the dialog goes on.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from channels.db import database_sync_to_async

from conversations.agent.tool_registry import Tool
from conversations.context.runtime_context import runtime_context
from conversations.models import MemoryItem, Message, Plan
from conversations.storage.shapes import TurnStart
from conversations.tools import ToolContext, ToolRegistry, default_registry
from providers.chunks import Done, TextDelta, ToolCallArgumentsDelta, ToolCallStart
from providers.errors import AuthenticationError
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
from providers.unicode_text import fix_surrogates
from tests.conversations.conftest import make_token
from tests.conversations.tools.test_builtin_tools import call, make_dialog, memory_registry, save, user_id

pytestmark = [pytest.mark.django_db(transaction=True)]

EMOJI = "\U0001f600"
ANY_OBJECT = {"type": "object", "properties": {}}


@pytest.fixture(autouse=True)
def no_auto_titles(settings):
    settings.PICOBOT = settings.PICOBOT.replace(auto_title_after=0)


async def start(connect, start_worker, provider, content="hi", **options):
    await start_worker(provider, **options)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": content, "client_msg_id": "m-1"})
    return client


async def finished(client, *, after: str | None = None, timeout: float = 20) -> dict:
    """The next terminal turn snapshot (of a turn other than ``after``)."""
    frame = await client.until(
        "turn_updated",
        lambda f: f["turn"]["status"] != "running" and f["turn"]["id"] != after,
        timeout=timeout,
    )
    return frame["turn"]


@database_sync_to_async
def rows() -> list[Message]:
    return list(Message.objects.order_by("dialog_id", "seq"))


def chunk_event(content: str) -> str:
    """One OpenAI chunk whose ``content`` is written as given (JSON escapes and all)."""
    return (
        'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":'
        '[{"index":0,"delta":{"content":"' + content + '"},"finish_reason":null}]}\n\n'
    )


STOP_EVENT = (
    'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m",'
    '"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)


def openai(server: LocalSSEServer) -> OpenAICompatProvider:
    return OpenAICompatProvider(server.base_url, "sk-test", "test-model", max_retries=0)


def answer(text: str) -> SSEResponse:
    return SSEResponse(pieces=split_events(sse_body(openai_events(text))))


async def test_a_pair_split_across_two_sse_events_is_committed_as_the_emoji(connect, start_worker):
    body = (chunk_event("smile ") + chunk_event("\\ud83d") + chunk_event("\\ude00") + STOP_EVENT).encode()
    async with LocalSSEServer([SSEResponse(pieces=split_events(body))]) as server:
        client = await start(connect, start_worker, openai(server))
        turn = await finished(client)

    assert turn["status"] == "completed", turn["error"]
    assert [b["text"] for b in turn["blocks"] if b["type"] == "assistant"] == ["smile " + EMOJI]
    assert (await rows())[-1].content == "smile " + EMOJI


async def test_a_pair_split_across_scripted_deltas_is_committed_as_the_emoji(connect, start_worker):
    provider = ScriptedProvider(
        [[TextDelta("smile "), TextDelta("\ud83d"), TextDelta("\ude00"), Done("stop")]]
    )
    client = await start(connect, start_worker, provider)
    turn = await finished(client)

    assert turn["status"] == "completed", turn["error"]
    assert (await rows())[-1].content == "smile " + EMOJI


async def test_a_lone_surrogate_in_the_answer_is_stored_as_a_replacement_and_the_next_turn_works(
    connect, start_worker
):
    body = (chunk_event("odd \\ud800 half") + STOP_EVENT).encode()
    async with LocalSSEServer([SSEResponse(pieces=split_events(body)), answer("second")]) as server:
        client = await start(connect, start_worker, openai(server))
        first = await finished(client)
        await client.send({"type": "message", "content": "again", "client_msg_id": "m-2"})
        second = await finished(client, after=first["id"])

    assert (first["status"], second["status"]) == ("completed", "completed"), (
        first["error"],
        second["error"],
    )
    assert [r.content for r in await rows() if r.role == "assistant"] == ["odd \ufffd half", "second"]
    assert server.requests[1]["messages"][-2]["content"] == "odd \ufffd half"


async def test_a_lone_surrogate_in_tool_arguments_reaches_the_tool_and_storage_as_a_replacement(
    connect, start_worker
):
    seen: list[dict] = []

    async def echo(arguments: dict) -> str:
        seen.append(arguments)
        return "got " + arguments["q"]

    provider = ScriptedProvider(
        [
            [
                ToolCallStart(0, "c1", "echo"),
                ToolCallArgumentsDelta(0, '{"q": "a\\ud800b"}'),
                Done("tool_calls"),
            ],
            script_text("answer"),
        ]
    )
    client = await start(
        connect, start_worker, provider, tools=ToolRegistry([Tool("echo", "echo", ANY_OBJECT, echo)])
    )
    turn = await finished(client)

    assert turn["status"] == "completed", turn["error"]
    assert seen == [{"q": "a\ufffdb"}]
    tool_block = next(b for b in turn["blocks"] if b["type"] == "tool")
    assert tool_block["arguments"] == {"q": "a\ufffdb"}
    assistant, result = [r for r in await rows() if r.role in ("assistant", "tool")][:2]
    assert assistant.tool_calls[0]["arguments"] == {"q": "a\ufffdb"}
    assert result.content == "got a\ufffdb"


async def test_a_tool_result_with_a_lone_surrogate_is_sent_and_stored_as_a_replacement(connect, start_worker):
    async def odd(arguments: dict) -> str:
        return "half \udc00 pair"

    responses = [
        SSEResponse(pieces=split_events(sse_body(openai_events(tool_calls=[("c1", "odd", "{}")])))),
        answer("done"),
    ]
    async with LocalSSEServer(responses) as server:
        tools = ToolRegistry([Tool("odd", "odd", ANY_OBJECT, odd)])
        client = await start(connect, start_worker, openai(server), tools=tools)
        turn = await finished(client)

    assert turn["status"] == "completed", turn["error"]
    assert server.requests[1]["messages"][-1]["content"] == "half \ufffd pair"
    assert [r.content for r in await rows() if r.role == "tool"] == ["half \ufffd pair"]


async def test_a_plan_step_with_a_lone_surrogate_does_not_break_later_turns(connect, start_worker):
    arguments = '{"steps": [{"text": "step \\ud800 one", "status": "pending"}]}'
    responses = [
        SSEResponse(
            pieces=split_events(sse_body(openai_events(tool_calls=[("p1", "plan_update", arguments)])))
        ),
        answer("planned"),
        answer("second turn ok"),
    ]
    async with LocalSSEServer(responses) as server:
        client = await start(connect, start_worker, openai(server), tools=default_registry())
        first = await finished(client)
        await client.send({"type": "message", "content": "again", "client_msg_id": "m-2"})
        second = await finished(client, after=first["id"])

    assert (first["status"], second["status"]) == ("completed", "completed"), (
        first["error"],
        second["error"],
    )
    plan = await database_sync_to_async(Plan.objects.get)()
    assert plan.content["steps"] == [{"text": "step \ufffd one", "status": "pending"}]
    assert "step \ufffd one" in json.dumps(server.requests[2], ensure_ascii=False)


async def test_a_user_message_with_a_lone_surrogate_is_stored_as_a_replacement(connect, start_worker):
    await start_worker(ScriptedProvider([script_text("ok")]))
    client = await connect(await make_token())
    await client.until("ready")
    await client.send('{"type": "message", "content": "hi \\ud800 there", "client_msg_id": "m-1"}')
    turn = await finished(client)

    assert turn["status"] == "completed", turn["error"]
    assert [r.content for r in await rows() if r.role == "user"] == ["hi \ufffd there"]


async def test_memory_with_a_lone_surrogate_is_stored_as_a_replacement():
    alice = memory_registry(ToolContext("cli_chat:1:d1", "cli_chat", "1", owner_id=await user_id("alice")))

    saved = await save(alice, "likes \ud800 tea", ["drink\udc00"])
    found = await alice.run(call("memory_search", {"query": "tea"}))

    item = await database_sync_to_async(MemoryItem.objects.get)()
    assert (item.content, item.tags) == ("likes \ufffd tea", ["drink\ufffd"])
    assert [h["id"] for h in json.loads(found.content)["results"]] == [saved["id"]]


async def test_a_plan_stored_before_the_fix_is_repaired_in_the_runtime_context():
    dialog = await make_dialog("cli_chat", "1")
    start_row = TurnStart(
        dialog_id=dialog,
        channel="cli_chat",
        chat_id="1",
        title="t",
        inbox_id="i",
        turn_id="t",
        reply_message_id="r",
        user_message={},
    )
    text = runtime_context(
        start_row, now=datetime(2026, 1, 1, tzinfo=UTC), plan="[ ] step \ud800", memory="m \udc00"
    )

    assert text.endswith("[ ] step \ufffd\nRecalled memory:\nm \ufffd")
    text.encode("utf-8")


# == QA 6b, B1: every string of every chunk, not only the text deltas ===========================


def encodable(frames: list[dict]) -> None:
    """Every frame can be sent as UTF-8 (Daphne closed the socket 1011 on the first that could not)."""
    for frame in frames:
        json.dumps(frame, ensure_ascii=False).encode("utf-8")


def tool_call_event(call_id: str, name: str) -> str:
    """One OpenAI chunk starting a tool call whose id and name are written as given (escapes and all)."""
    return (
        'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        '"delta":{"tool_calls":[{"index":0,"id":"' + call_id + '","type":"function",'
        '"function":{"name":"' + name + '","arguments":"{}"}}]},"finish_reason":null}]}\n\n'
    )


TOOL_CALLS_EVENT = (
    'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m",'
    '"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\ndata: [DONE]\n\n'
)


async def test_a_lone_surrogate_in_a_tool_calls_id_and_name_is_shown_sent_and_stored_as_a_replacement(
    connect, start_worker
):
    body = (tool_call_event("call_\\ud800", "plan\\udc00") + TOOL_CALLS_EVENT).encode()
    async with LocalSSEServer([SSEResponse(pieces=split_events(body)), answer("done")]) as server:
        client = await start(connect, start_worker, openai(server), tools=default_registry())
        turn = await finished(client)

    assert turn["status"] == "completed", turn["error"]
    encodable(client.frames)
    [block] = [b for b in turn["blocks"] if b["type"] == "tool"]
    assert (block["id"], block["name"], block["status"]) == ("call_\ufffd", "plan\ufffd", "failed")
    assert "\ufffd" in json.dumps(client.frames, ensure_ascii=False)
    # The call and its result keep one id: in the next request and in history.
    sent = server.requests[1]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == sent[-1]["tool_call_id"] == "call_\ufffd"
    # OpenAI refuses a function name outside ^[a-zA-Z0-9_-]{1,64}$ (QA 6c): history keeps the
    # model's name, the request carries the placeholder.
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "unnamed_tool"
    assistant, result = [r for r in await rows() if r.role in ("assistant", "tool")][:2]
    assert assistant.tool_calls[0]["id"] == result.tool_call_id == "call_\ufffd"
    assert result.content.startswith("Error: unknown tool 'plan\ufffd'")


@pytest.mark.parametrize(
    ("call_id", "name"),
    [("c\ud800", "echo"), ("c1", "echo\udc00"), ("c1", "\ud83d")],
    ids=["id", "name", "high-half-name"],
)
async def test_a_turn_with_a_lone_surrogate_in_a_call_completes_and_the_next_one_too(
    connect, start_worker, call_id, name
):
    async def echo(arguments: dict) -> str:
        return "fine"

    provider = ScriptedProvider(
        [
            [ToolCallStart(0, call_id, name), ToolCallArgumentsDelta(0, "{}"), Done("tool_calls")],
            script_text("answer"),
            script_text("second"),
        ]
    )
    tools = ToolRegistry([Tool("echo", "echo", ANY_OBJECT, echo)])
    client = await start(connect, start_worker, provider, tools=tools)
    first = await finished(client)
    await client.send({"type": "message", "content": "again", "client_msg_id": "m-2"})
    second = await finished(client, after=first["id"])

    assert (first["status"], second["status"]) == ("completed", "completed"), (
        first["error"],
        second["error"],
    )
    encodable(client.frames)
    [block] = [b for b in first["blocks"] if b["type"] == "tool"]
    assert (block["id"], block["name"]) == (fix_surrogates(call_id), fix_surrogates(name))
    assert "\ufffd" in block["id"] + block["name"]


async def test_a_provider_error_message_with_a_lone_surrogate_is_shown_as_a_replacement(
    connect, start_worker, caplog
):
    error = AuthenticationError(
        "bad key \ud800 given",
        http_status=401,
        provider_code="invalid_api_key",
        provider_message="bad key \ud800 given",
    )
    provider = ScriptedProvider([[TextDelta("partial \ud83d"), error], script_text("second")])
    client = await start(connect, start_worker, provider)
    first = await finished(client)
    await client.send({"type": "message", "content": "again", "client_msg_id": "m-2"})
    second = await finished(client, after=first["id"])

    assert first["status"] == "failed" and "bad key \ufffd given" in first["error"]
    assert second["status"] == "completed", second["error"]
    encodable(client.frames)
    # The half held back for its partner never came: neither shown nor kept (shown means kept).
    assert [b["text"] for b in first["blocks"] if b["type"] == "assistant"] == ["partial "]
    assert [r.content for r in await rows() if r.role == "assistant"] == ["partial ", "second"]
    for record in caplog.records:
        record.getMessage().encode("utf-8")  # logged on one encodable line too
