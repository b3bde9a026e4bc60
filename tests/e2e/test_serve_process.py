"""The real ``manage.py serve`` process with a real WebSocket client.

The LLM is an OpenAI-compatible local HTTP server streaming recorded bytes (pieces paced so the
client sees the turn live); the gateway is the real process, restarted in the middle like an
operator would (SIGTERM), with its own SQLite file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import websockets

from providers.testing import LocalSSEServer, SSEResponse
from tests.conversations.streams import ANSWER, CALL_ID, answer_pieces, text_pieces, tool_call_pieces
from tests.e2e.serve_process import ServeProcess, manage, openai_env

pytestmark = [pytest.mark.e2e]


class WsClient:
    """A real WebSocket client that records frames and acknowledges snapshots with ``seen``."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.frames: list[dict] = []

    async def send(self, frame: dict | str) -> None:
        await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    async def until(self, kind: str, timeout: float = 20) -> dict:
        async with __import__("asyncio").timeout(timeout):
            while True:
                frame = json.loads(await self.ws.recv())
                self.frames.append(frame)
                if frame["type"] == "turn_updated":
                    turn = frame["turn"]
                    await self.send({"type": "seen", "turn_id": turn["id"], "revision": turn["revision"]})
                if frame["type"] == kind:
                    return frame

    def of_type(self, kind: str) -> list[dict]:
        return [f for f in self.frames if f["type"] == kind]


def connect(server: ServeProcess, token: str) -> websockets.connect:
    return websockets.connect(server.ws_url, additional_headers={"Authorization": f"Bearer {token}"})


def paced(pieces: list[bytes]) -> SSEResponse:
    return SSEResponse.coerce((200, {"content-type": "text/event-stream"}, pieces, 0.05))


async def test_serve_streams_a_tool_turn_commits_it_and_keeps_it_across_a_restart(tmp_path: Path):
    manage(tmp_path, "migrate", "--noinput")
    token = manage(tmp_path, "createtoken", "alice").strip().splitlines()[-1]
    assert token.startswith("pb_")

    async with LocalSSEServer(
        [paced(tool_call_pieces()), paced(answer_pieces()), paced(text_pieces("Again."))]
    ) as llm:
        env = openai_env(llm)
        async with ServeProcess(tmp_path, env) as server, connect(server, token) as ws:
            client = WsClient(ws)
            ready = await client.until("ready")
            assert ready["provider"] == {"name": "openai", "model": "test-model", "offline": False}
            await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "e2e-1"})
            ack = await client.until("ack")
            committed = await client.until("turn_committed")

            updates = [f["turn"] for f in client.of_type("turn_updated")]
            revisions = [u["revision"] for u in updates]
            assert len(updates) >= 3 and revisions == sorted(set(revisions))
            final = updates[-1]
            assert final["status"] == "completed"
            tool = [b for b in final["blocks"] if b["type"] == "tool"]
            assert [(b["id"], b["status"]) for b in tool] == [(CALL_ID, "completed")]
            answer = "".join(b["text"] for b in final["blocks"] if b["type"] == "assistant")
            assert answer.strip() == ANSWER
            assert all("<think>" not in b.get("text", "") for u in updates for b in u["blocks"])
            rows = committed["messages"]
            assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]
            assert rows[1]["tool_calls"][0]["id"] == rows[2]["tool_call_id"] == CALL_ID
            # Seen by the LLM server: one system message first, the tool result's id.
            second = llm.requests[1]["messages"]
            assert second[0]["role"] == "system" and [m["role"] for m in second].count("system") == 1
            assert [m.get("tool_call_id") for m in second if m["role"] == "tool"] == [CALL_ID]

        # Restart: the history, its revision and client_msg_id idempotency survive.
        async with ServeProcess(tmp_path, env) as server, connect(server, token) as ws:
            client = WsClient(ws)
            ready2 = await client.until("ready")
            assert ready2["active_session_id"] == ready["active_session_id"]
            await client.send({"type": "history", "session_id": ready2["active_session_id"]})
            history = await client.until("session_history")
            assert history["history_revision"] == committed["history_revision"] == 4
            assert [m["id"] for m in history["messages"]] == [r["id"] for r in rows]

            await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "e2e-1"})
            again = await client.until("ack")
            assert again["message_id"] == ack["message_id"]
            await client.send("{not json")
            assert (await client.until("error"))["code"] == "invalid_json"
            await client.send({"type": "history", "session_id": ready2["active_session_id"]})
            history = await client.until("session_history")
            assert [m["role"] for m in history["messages"]].count("user") == 1
            assert len(llm.requests) == 2, "the repeated client_msg_id started no turn"

            # SIGTERM: the server closes its sockets with a close frame and exits cleanly.
            assert await server.stop() == 0
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000  # Daphne drops reasons


async def test_serve_refuses_connections_without_valid_credentials(tmp_path: Path):
    async with ServeProcess(tmp_path) as server:
        for headers in ({}, {"Authorization": "Bearer pb_not_a_token"}):
            async with websockets.connect(server.ws_url, additional_headers=headers) as ws:
                frame = json.loads(await ws.recv())
                assert frame == {
                    "type": "error",
                    "code": "unauthorized",
                    "message": "authentication required",
                }
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await ws.recv()
                assert closed.value.rcvd.code == 4401


async def test_serve_answers_offline_with_the_replay_provider(tmp_path: Path):
    async with ServeProcess(tmp_path) as server:
        token = manage(tmp_path, "createtoken", "bob").strip().splitlines()[-1]
        async with connect(server, token) as ws:
            client = WsClient(ws)
            ready = await client.until("ready")
            assert ready["provider"]["offline"] is True and ready["provider"]["name"] == "replay"
            await client.send({"type": "message", "content": "Hello there", "client_msg_id": "off-1"})
            committed = await client.until("turn_committed")
            final = client.of_type("turn_updated")[-1]["turn"]
            assert final["status"] == "completed"
            answer = committed["messages"][-1]["content"]
            assert "offline" in answer.lower() and "<think>" not in answer and "Hello there" in answer
            # A greeting is not a time question (the runtime context's "time=" must not count).
            assert not [b for b in final["blocks"] if b["type"] == "tool"]
