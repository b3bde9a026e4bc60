"""Restart safety with the real ``serve`` process (DESIGN §3 InboxMessage).

The server is SIGKILLed while a turn is inside a tool call (``tests.e2e.slow_tools`` plugged in
through ``PICOBOT_TOOL_MODULES``) with two more messages acknowledged and queued behind it. After a
restart on the same SQLite file the chat is told the killed turn was interrupted (a terminal
``failed`` snapshot and a warning notice, durable until a client received them), the queued
messages run in order, the killed turn left only its user message in history, and re-sending its
``client_msg_id`` starts nothing.

The LLM is an OpenAI-compatible local server whose handler answers by the request's last user
message; it holds message 2's answer until the test has connected its client, so no frame of the
restarted server can slip past the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import websockets

from conversations.context.history import INTERRUPTED_RESULT
from conversations.runtime.notify import INTERRUPTED_NOTICE, RECOVERY_REVISION, interrupted_notice_id
from providers.messages import RUNTIME_CONTEXT_MARKER
from providers.testing import (
    LocalSSEServer,
    RecordedRequest,
    SSEResponse,
    openai_events,
    split_events,
    sse_body,
)
from tests.conversations.streams import text_pieces
from tests.e2e.serve_process import ServeProcess, manage
from tests.e2e.slow_tools import SLOW_TOOL

pytestmark = [pytest.mark.e2e]

SLOW_CALL_ID = "call_sl0w_01"
FIRST, SECOND, THIRD, FOURTH = "Please wait for me.", "Second message.", "Third message.", "Fourth message."
ANSWERS = {SECOND: "Answer two.", THIRD: "Answer three.", FOURTH: "Answer four."}
WAIT = 60  # seconds; generous for busy CI machines, never a fixed sleep


class WsClient:
    """A real WebSocket client that records frames and acknowledges snapshots with ``seen``."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.frames: list[dict] = []

    async def send(self, frame: dict) -> None:
        await self.ws.send(json.dumps(frame))

    async def until(
        self, kind: str, predicate: Callable[[dict], bool] | None = None, timeout: float = WAIT
    ) -> dict:
        async with asyncio.timeout(timeout):
            while True:
                frame = json.loads(await self.ws.recv())
                self.frames.append(frame)
                if frame["type"] == "turn_updated":
                    turn = frame["turn"]
                    await self.send({"type": "seen", "turn_id": turn["id"], "revision": turn["revision"]})
                if frame["type"] == kind and (predicate is None or predicate(frame)):
                    return frame

    async def barrier(self) -> None:
        """Everything the server sent before now has arrived (a ping is answered in order)."""
        await self.send({"type": "ping", "nonce": "barrier"})
        await self.until("pong")

    def of_type(self, kind: str) -> list[dict]:
        return [f for f in self.frames if f["type"] == kind]


def connect(server: ServeProcess, token: str) -> websockets.connect:
    return websockets.connect(server.ws_url, additional_headers={"Authorization": f"Bearer {token}"})


def user_text(message: dict) -> str:
    """A request message's text without the runtime context the server appends (DESIGN §6)."""
    content = message.get("content") or ""
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content.split(RUNTIME_CONTEXT_MARKER)[0]


def last_user_text(body: dict) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return user_text(users[-1]) if users else ""


def paced(pieces: list[bytes]) -> SSEResponse:
    return SSEResponse.coerce((200, {"content-type": "text/event-stream"}, pieces, 0.05))


def slow_call_pieces() -> list[bytes]:
    """One iteration that calls ``slow_tool`` (arguments in fragments, like ``tool_call_pieces``)."""
    events = openai_events(
        reasoning="The user asked me to wait.", tool_calls=[(SLOW_CALL_ID, SLOW_TOOL, '{"seconds": 300}')]
    )
    return split_events(sse_body(events))


def turn_of(frame: dict) -> dict:
    return frame["turn"]


def slow_tool_running(frame: dict) -> bool:
    return any(
        b["type"] == "tool" and b["name"] == SLOW_TOOL and b["status"] == "running"
        for b in frame["turn"]["blocks"]
    )


async def test_a_turn_killed_inside_a_tool_is_reported_interrupted_and_the_queue_runs_after_restart(
    tmp_path: Path,
):
    manage(tmp_path, "migrate", "--noinput")
    token = manage(tmp_path, "createtoken", "alice").strip().splitlines()[-1]
    second_arrived, release_second = asyncio.Event(), asyncio.Event()

    async def llm_handler(request: RecordedRequest) -> SSEResponse | None:
        text = last_user_text(request.json() or {})
        if text == FIRST:
            return paced(slow_call_pieces())
        if text == SECOND:
            second_arrived.set()  # the restarted worker has already dealt with the killed turn
            await release_second.wait()
        if text in ANSWERS:
            return paced(text_pieces(ANSWERS[text]))
        return None  # anything else is a bug: answered 500 and recorded in llm.errors

    async with LocalSSEServer(handler=llm_handler) as llm:
        env = {
            "PICOBOT_LLM_PROVIDER": "openai",
            "PICOBOT_LLM_BASE_URL": llm.base_url,
            "PICOBOT_LLM_API_KEY": "test-key",
            "PICOBOT_LLM_MODEL": "test-model",
            "PICOBOT_LLM_MAX_RETRIES": "0",
            "PICOBOT_TOOL_MODULES": "tests.e2e.slow_tools",
            # Off: this test is about a turn that keeps nothing (test_restart_checkpoint keeps text).
            "PICOBOT_TURN_CHECKPOINT_SECONDS": "0",
        }

        # --- 1. message 1 runs into slow_tool; messages 2 and 3 queue behind it; SIGKILL. ------------
        async with ServeProcess(tmp_path, env) as server, connect(server, token) as ws:
            client = WsClient(ws)
            ready = await client.until("ready")
            session_id = ready["active_session_id"]
            await client.send({"type": "message", "content": FIRST, "client_msg_id": "restart-1"})
            ack1 = await client.until("ack")
            running = turn_of(await client.until("turn_updated", slow_tool_running))
            turn1, reply1 = running["id"], running["message_id"]
            await client.send({"type": "message", "content": SECOND, "client_msg_id": "restart-2"})
            ack2 = await client.until("ack")
            await client.send({"type": "message", "content": THIRD, "client_msg_id": "restart-3"})
            ack3 = await client.until("ack")
            assert (ack2["queued"], ack3["queued"]) == (1, 2), "acked behind the running turn"
            assert await server.kill() < 0
            with pytest.raises(websockets.ConnectionClosed):
                while True:
                    await ws.recv()
        assert [last_user_text(r.json()) for r in llm.recorded] == [FIRST]

        # --- 2. restart on the same data dir; connect once the killed turn was dealt with. ----------
        async with ServeProcess(tmp_path, env) as server:
            async with asyncio.timeout(WAIT):
                await second_arrived.wait()
            async with connect(server, token) as ws:
                client = WsClient(ws)
                ready = await client.until("ready")
                assert ready["active_session_id"] == session_id
                assert turn1 not in [t["id"] for t in ready["running"]]

                # The client is told: turn 1 ended failed (after its running snapshots) + a warning.
                failed = turn_of(await client.until("turn_updated", lambda f: f["turn"]["id"] == turn1))
                assert failed["status"] == "failed" and failed["message_id"] == reply1
                assert failed["revision"] >= RECOVERY_REVISION and failed["session_id"] == session_id
                notice = await client.until("notification", lambda f: f.get("turn_id") == turn1)
                assert notice["level"] == "warning" and notice["content"] == INTERRUPTED_NOTICE
                assert notice["id"] == interrupted_notice_id(turn1) and notice["session_id"] == session_id

                # Messages 2 and 3 then run, in order.
                release_second.set()
                first_commit = await client.until("turn_committed")
                second_commit = await client.until("turn_committed")
                for commit, text in ((first_commit, SECOND), (second_commit, THIRD)):
                    assert commit["session_id"] == session_id
                    assert [(m["role"], m["content"]) for m in commit["messages"]] == [
                        ("user", text),
                        ("assistant", ANSWERS[text]),
                    ]
                assert [m["id"] for m in first_commit["messages"][:1] + second_commit["messages"][:1]] == [
                    ack2["message_id"],
                    ack3["message_id"],
                ]
                requests = [r.json() for r in llm.recorded]
                assert [last_user_text(r) for r in requests] == [FIRST, SECOND, THIRD]
                # What the model saw after the restart: the killed turn's user message alone.
                assert [(m["role"], user_text(m)) for m in requests[1]["messages"][1:]] == [
                    ("user", FIRST),
                    ("user", SECOND),
                ]
                assert not [m for r in requests for m in r["messages"] if m["role"] == "tool"]
                assert all(INTERRUPTED_RESULT not in json.dumps(r) for r in requests)

                # History: message 1's row and nothing else of the killed turn.
                await client.send({"type": "history", "session_id": session_id})
                history = (await client.until("session_history"))["messages"]
                assert [(m["role"], m["content"]) for m in history] == [
                    ("user", FIRST),
                    ("user", SECOND),
                    ("assistant", ANSWERS[SECOND]),
                    ("user", THIRD),
                    ("assistant", ANSWERS[THIRD]),
                ]
                assert history[0]["id"] == ack1["message_id"]
                assert [m["role"] for m in history if m["turn_id"] == turn1] == ["user"]
                assert [m["seq"] for m in history] == [1, 2, 3, 4, 5]

                # Re-sending message 1's client_msg_id: the same message, no new turn. Message 4
                # behind it is the barrier: had the repeat started a turn, it would run first.
                await client.send({"type": "message", "content": FIRST, "client_msg_id": "restart-1"})
                again = await client.until("ack")
                assert again["message_id"] == ack1["message_id"] and again["session_id"] == session_id
                await client.send({"type": "message", "content": FOURTH, "client_msg_id": "restart-4"})
                fourth = await client.until("turn_committed")
                assert [m["content"] for m in fourth["messages"]] == [FOURTH, ANSWERS[FOURTH]]
                assert [last_user_text(r.json()) for r in llm.recorded] == [FIRST, SECOND, THIRD, FOURTH]
                await client.barrier()
                # One connection heard of turn 1 exactly once, and every other turn completed.
                assert [f["id"] for f in client.of_type("notification") if f.get("turn_id") == turn1] == [
                    notice["id"]
                ]
                assert len([f for f in client.of_type("turn_updated") if f["turn"]["id"] == turn1]) == 1
                finals = {
                    f["turn"]["id"]: f["turn"]["status"]
                    for f in client.of_type("turn_updated")
                    if f["turn"]["status"] != "running"
                }
                assert sorted(finals.values()) == ["completed", "completed", "completed", "failed"]

            # A client connecting after all that is not told again: the notice was delivered.
            async with connect(server, token) as ws:
                late = WsClient(ws)
                await late.until("ready")
                await late.barrier()
                assert not [f for f in late.of_type("notification") if f.get("turn_id") == turn1]
                assert not [f for f in late.of_type("turn_updated") if f["turn"]["id"] == turn1]
        assert llm.errors == []


async def test_serve_refuses_to_start_with_a_tool_module_it_cannot_import(tmp_path: Path):
    server = ServeProcess(tmp_path, {"PICOBOT_TOOL_MODULES": "tests.e2e.slow_tools,tests.e2e.no_such_tools"})
    try:
        with pytest.raises(RuntimeError, match="serve exited before announcing") as failed:
            await server.start()
    finally:
        if server.proc is not None and server.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                server.proc.kill()  # only if it did start after all
            await server.proc.wait()
    message = str(failed.value)
    assert "PICOBOT_TOOL_MODULES" in message and "tests.e2e.no_such_tools" in message
    assert "Traceback" not in message, "a configuration mistake is one clear line, not a stack trace"
