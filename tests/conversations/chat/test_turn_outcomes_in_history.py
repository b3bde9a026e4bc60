"""What a user saw at the end of a turn survives a reload (issue 14, PROTOCOL §1 "History message").

Through the whole gateway: a failed, an interrupted and a stopped turn leave their ``outcome`` on
the user row of a fresh ``history`` (and of ``turn_committed``); a turn stopped while it showed
only reasoning, or while its tool ran, keeps that reasoning and those tool calls, every call
followed by its result; and the next turn's request, as the scripted provider receives it, is one
both vendors accept.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from conversations.agent.tool_registry import Tool, ToolRegistry
from conversations.storage import TURN_INTERRUPTED_ERROR
from providers._anthropic_request import build_messages_request
from providers._openai_request import build_chat_request
from providers.chunks import ReasoningDelta
from providers.errors import ProviderConnectionError
from providers.testing import ScriptedProvider, script_text, script_tool_call
from providers.types import ProviderRequest
from tests.conversations.conftest import make_token
from tests.conversations.runtime.test_restart_notices import leave_a_started_turn, until_interrupted

pytestmark = [pytest.mark.django_db(transaction=True)]

HOLD = object()
"""In a :class:`HoldingProvider` script: the stream waits here until the turn is cancelled."""


class HoldingProvider(ScriptedProvider):
    """A scripted provider whose stream can stop at :data:`HOLD` (``holding`` is set then)."""

    def __init__(self, responses: list) -> None:
        super().__init__(responses)
        self.holding = asyncio.Event()

    async def _stream(self, request):
        async for item in super()._stream(request):
            if item is HOLD:
                self.holding.set()
                await asyncio.Event().wait()
            yield item


class GateTool:
    """A tool that never returns by itself."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def __call__(self, arguments: dict) -> str:
        self.started.set()
        await asyncio.Event().wait()
        return "never"

    def registry(self) -> ToolRegistry:
        return ToolRegistry([Tool("gate", "waits", {"type": "object", "properties": {}}, self, timeout=600)])


async def open_chat(connect, token: str | None = None):
    client = await connect(token or await make_token())
    return client, (await client.until("ready"))["active_session_id"]


async def send(client, content: str, ref: str) -> None:
    await client.send({"type": "message", "content": content, "client_msg_id": ref})


async def terminal(client) -> dict:
    return (await client.until("turn_updated", lambda f: f["turn"]["status"] != "running"))["turn"]


async def history(client, session_id: str) -> list[dict]:
    await client.send({"type": "history", "session_id": session_id})
    return (await client.until("session_history"))["messages"]


def user_outcomes(messages: list[dict]) -> list[dict | None]:
    return [m["outcome"] for m in messages if m["role"] == "user"]


def assert_valid_for_both_vendors(request: ProviderRequest) -> None:
    """The request as the OpenAI-compatible and the Anthropic mappers send it is one they accept:
    no assistant message without text or tool calls, every tool call answered right after it."""
    body = build_chat_request(request, model="m")["messages"]
    for index, message in enumerate(body):
        if message["role"] != "assistant":
            continue
        calls = [c["id"] for c in message.get("tool_calls") or []]
        assert message["content"] or calls, f"an empty assistant message: {message}"
        answered = [
            m["tool_call_id"] for m in body[index + 1 : index + 1 + len(calls)] if m["role"] == "tool"
        ]
        assert answered == calls
    turns = build_messages_request(request, model="m")["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant"] * (len(turns) // 2) + ["user"] * (
        len(turns) % 2
    )
    for index, turn in enumerate(turns):
        assert turn["content"], f"an empty {turn['role']} turn"
        uses = [b["id"] for b in turn["content"] if b["type"] == "tool_use"]
        if uses:
            results = [b["tool_use_id"] for b in turns[index + 1]["content"] if b["type"] == "tool_result"]
            assert results == uses


async def test_a_failed_turn_keeps_its_failed_outcome_in_a_fresh_history(connect, start_worker):
    outage = ProviderConnectionError("connect to https://llm.example/v1 failed")
    await start_worker(ScriptedProvider([outage]))
    token = await make_token()
    client, session_id = await open_chat(connect, token)
    await send(client, "hello?", "f-1")
    turn = await terminal(client)
    committed = await client.until("turn_committed")
    assert turn["status"] == "failed" and "could not be reached" in turn["error"]
    expected = {"status": "failed", "error": turn["error"]}
    assert user_outcomes(committed["messages"]) == [expected]

    reloaded, _ = await open_chat(connect, token)
    messages = await history(reloaded, session_id)
    assert [(m["role"], m["content"]) for m in messages] == [("user", "hello?")]
    assert user_outcomes(messages) == [expected]
    assert "llm.example" not in str(messages)


async def test_a_turn_interrupted_by_a_restart_shows_interrupted_in_history(connect, start_worker):
    lost = await database_sync_to_async(leave_a_started_turn)()
    await start_worker(ScriptedProvider([]))
    await until_interrupted(lost["turn_id"])
    client, session_id = await open_chat(connect)
    shown = (await client.until("turn_updated", lambda f: f["turn"]["id"] == lost["turn_id"]))["turn"]
    messages = await history(client, session_id)
    assert [m["id"] for m in messages] == [lost["inbox_id"]]
    assert user_outcomes(messages) == [{"status": "interrupted", "error": shown["error"]}]
    assert shown["error"] == TURN_INTERRUPTED_ERROR


async def test_a_turn_stopped_while_it_only_reasoned_keeps_its_reasoning_and_the_next_request_is_valid(
    connect, start_worker
):
    provider = HoldingProvider(
        [[ReasoningDelta("Let me think"), ReasoningDelta(" it over"), HOLD], script_text("Sure")]
    )
    await start_worker(provider)
    client, session_id = await open_chat(connect)
    await send(client, "think first", "r-1")
    await asyncio.wait_for(provider.holding.wait(), 10)
    await client.until("turn_updated", lambda f: any(b["type"] == "reasoning" for b in f["turn"]["blocks"]))
    await client.send({"type": "stop", "session_id": session_id})
    turn = await terminal(client)
    committed = await client.until("turn_committed")
    assert (turn["status"], turn["error"]) == ("cancelled", "stopped")
    stopped = [
        (m["role"], m["content"], m["reasoning"], m["completion_status"]) for m in committed["messages"]
    ]
    assert stopped == [
        ("user", "think first", None, "completed"),
        ("assistant", "", "Let me think it over", "cancelled"),
    ]
    assert committed["messages"][1]["id"] == turn["message_id"]

    await send(client, "and now?", "r-2")
    await client.until("turn_updated", lambda f: f["turn"]["status"] == "completed")
    messages = await history(client, session_id)
    assert [(m["role"], m["reasoning"]) for m in messages][:2] == [
        ("user", None),
        ("assistant", "Let me think it over"),
    ]
    assert user_outcomes(messages) == [{"status": "cancelled", "error": "stopped"}, None]
    request = provider.requests[1]
    assert [(m.role, m.text) for m in request.messages[1:]][:1] == [("user", "think first")]
    assert [m.role for m in request.messages] == ["system", "user", "user"], "the reasoning is not sent back"
    assert_valid_for_both_vendors(request)


async def test_a_turn_stopped_while_its_tool_ran_keeps_the_call_with_an_error_result(connect, start_worker):
    gate = GateTool()
    answer = [ReasoningDelta("I need the gate"), *script_tool_call("call_gate", "gate", {})]
    provider = ScriptedProvider([answer, script_text("Done")])
    await start_worker(provider, tools=gate.registry())
    client, session_id = await open_chat(connect)
    await send(client, "open it", "t-1")
    await asyncio.wait_for(gate.started.wait(), 10)
    await client.send({"type": "stop", "session_id": session_id})
    turn = await terminal(client)
    assert turn["status"] == "cancelled"
    assert [(b["id"], b["status"]) for b in turn["blocks"] if b["type"] == "tool"] == [
        ("call_gate", "failed")
    ]

    await send(client, "never mind", "t-2")
    await client.until("turn_updated", lambda f: f["turn"]["status"] == "completed")
    messages = await history(client, session_id)
    kept = [
        (
            m["role"],
            m["reasoning"],
            [c["id"] for c in m["tool_calls"]],
            m["tool_call_id"],
            m["is_error"],
            m["completion_status"],
        )
        for m in messages[:3]
    ]
    assert kept == [
        ("user", None, [], None, False, "completed"),
        ("assistant", "I need the gate", ["call_gate"], None, False, "cancelled"),
        ("tool", None, [], "call_gate", True, "completed"),
    ]
    assert "stopped" in messages[2]["content"]
    assert user_outcomes(messages) == [{"status": "cancelled", "error": "stopped"}, None]
    request = provider.requests[1]
    assert [m.role for m in request.messages] == ["system", "user", "assistant", "tool", "user"]
    assert_valid_for_both_vendors(request)
