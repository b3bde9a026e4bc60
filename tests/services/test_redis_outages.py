"""Redis restarted or down under streaming turns, with the real processes (issue 16, Must show 5).

Both deployments that use Redis — the embedded ``serve`` with ``PICOBOT_REDIS_URL`` (SQLite) and
the scale-out ``serve --no-worker`` + ``runagent`` (PostgreSQL) — run against a private
``redis-server`` (``private_redis``) that the test stops and starts. What must hold: no socket is
closed (it used to be 1011), no handshake answers 500, every turn commits and its final reaches the
client that sent it (live, or rebuilt from storage by the convergence path), and new turns work
afterwards without restarting PicoBot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import websockets

from providers.testing import LocalSSEServer, SSEResponse, openai_events, split_events, sse_body
from tests.e2e.serve_process import REPO, ServeProcess, manage, openai_env, server_env
from tests.services.private_redis import PrivateRedis
from tests.services.test_scale_out import free_port, postgres_url, wait_for_port  # noqa: F401 - fixture

pytestmark = [pytest.mark.services, pytest.mark.e2e]

ANSWER = " ".join(f"word{i}" for i in range(50))
PIECE_SECONDS = 0.1  # a turn streams for about 5 s
DIALOGS_PER_CLIENT = 10
WAIT_SECONDS = 180
FAST_TIMERS = {
    # Defaults are 5 s each; shorter here only to keep the test short. The rules are the same.
    "PICOBOT_RECONCILE_QUIET_SECONDS": "2",
    "PICOBOT_INBOX_SCAN_SECONDS": "1",
}


def streamed_answer() -> SSEResponse:
    return SSEResponse.coerce(
        (
            200,
            {"content-type": "text/event-stream"},
            split_events(sse_body(openai_events(ANSWER))),
            PIECE_SECONDS,
        )
    )


class ChatClient:
    """A WebSocket client that reads in the background, acknowledges snapshots with ``seen``, and
    records every frame and how the socket ended."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.frames: list[dict] = []
        self.closed: websockets.ConnectionClosed | None = None
        self._changed = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for text in self.ws:
                frame = json.loads(text)
                self.frames.append(frame)
                if frame["type"] == "turn_updated":
                    turn = frame["turn"]
                    await self.ws.send(
                        json.dumps({"type": "seen", "turn_id": turn["id"], "revision": turn["revision"]})
                    )
                self._changed.set()
        except websockets.ConnectionClosed as exc:
            self.closed = exc
        finally:
            self.closed = self.closed or websockets.ConnectionClosedOK(None, None)
            self._changed.set()

    async def wait_for(self, found: Callable[[], object], timeout: float = WAIT_SECONDS) -> object:
        """Wait until ``found()`` is truthy; fails at once if the socket closed."""
        async with asyncio.timeout(timeout):
            while not (result := found()):
                assert self.closed is None, f"the socket closed: {self.closed!r}"
                self._changed.clear()
                await self._changed.wait()
            return result

    async def send(self, frame: dict) -> None:
        await self.ws.send(json.dumps(frame))

    def of_type(self, kind: str, **fields: object) -> list[dict]:
        return [f for f in self.frames if f["type"] == kind and all(f.get(k) == v for k, v in fields.items())]

    def turns(self, session_id: str) -> list[dict]:
        return [f["turn"] for f in self.of_type("turn_updated") if f["turn"]["session_id"] == session_id]

    def streaming(self, session_id: str) -> bool:
        return any(t["status"] == "running" and t["blocks"] for t in self.turns(session_id))

    def final(self, session_id: str, after: int = 0) -> dict | None:
        """The first terminal snapshot of the dialog's turns after its ``after`` first finals."""
        finals = [t for t in self.turns(session_id) if t["status"] != "running"]
        return finals[after] if len(finals) > after else None

    def committed(self, session_id: str) -> list[dict]:
        return self.of_type("turn_committed", session_id=session_id)

    async def new_dialog(self) -> str:
        seen = len(self.of_type("session_changed"))
        await self.send({"type": "message", "content": "/new"})
        await self.wait_for(lambda: len(self.of_type("session_changed")) > seen)
        return self.of_type("session_changed")[seen]["session_id"]

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


def answer_of(turn: dict) -> str:
    return "".join(b["text"] for b in turn["blocks"] if b["type"] == "assistant")


async def connect(ws_url: str, token: str) -> ChatClient:
    """A new socket; a handshake answered with HTTP 500 (or anything but 101) fails the test."""
    ws = await websockets.connect(ws_url, additional_headers={"Authorization": f"Bearer {token}"})
    client = ChatClient(ws)
    await client.wait_for(lambda: client.of_type("ready"))
    return client


async def send_and_finish(client: ChatClient, session_id: str, tag: str, after: int) -> None:
    """Send a message to the dialog and wait for its turn's final and ``turn_committed``."""
    await client.send(
        {"type": "message", "content": f"Say it ({tag})", "session_id": session_id, "client_msg_id": tag}
    )
    final = await client.wait_for(lambda: client.final(session_id, after))
    assert final["status"] == "completed" and answer_of(final) == ANSWER
    await client.wait_for(lambda: len(client.committed(session_id)) > after)


@contextlib.asynccontextmanager
async def picobot(
    mode: str, tmp_path: Path, redis_url: str, llm: LocalSSEServer, request
) -> AsyncIterator[str]:
    """Run PicoBot in ``mode``; yields its WebSocket URL. Processes are stopped on exit."""
    extra = {**openai_env(llm), **FAST_TIMERS, "PICOBOT_REDIS_URL": redis_url}
    if mode == "embedded":
        async with ServeProcess(tmp_path, extra) as server:
            try:
                yield server.ws_url
            finally:
                print("---- serve ----\n" + "".join(server.output[-80:]))
        return
    extra["PICOBOT_DATABASE_URL"] = request.getfixturevalue("postgres_url")
    manage(tmp_path, "migrate", "--noinput", extra_env=extra)
    env = server_env(tmp_path, extra)
    port = free_port()
    logs = {name: tmp_path / f"{name}.log" for name in ("serve", "runagent")}
    commands = {
        "serve": [
            "manage.py",
            "serve",
            "--no-worker",
            "--no-migrate",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        "runagent": ["manage.py", "runagent", "--worker-id", "outage-test"],
    }
    procs = []
    try:
        for name, args in commands.items():
            with logs[name].open("w") as out:
                procs.append(
                    await asyncio.create_subprocess_exec(
                        sys.executable, *args, cwd=REPO, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
                    )
                )
        await wait_for_port(port)
        yield f"ws://127.0.0.1:{port}/ws/chat/"
        assert all(p.returncode is None for p in procs), "a PicoBot process died"
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
                try:
                    async with asyncio.timeout(20):
                        await proc.wait()
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
        for name, path in logs.items():
            print(f"---- {name} ----\n" + "\n".join(path.read_text().splitlines()[-80:]))


def tokens(tmp_path: Path, mode: str, request, *users: str) -> list[str]:
    extra = {"PICOBOT_DATABASE_URL": request.getfixturevalue("postgres_url")} if mode == "scale-out" else {}
    manage(tmp_path, "migrate", "--noinput", extra_env=extra)
    return [manage(tmp_path, "createtoken", user, extra_env=extra).strip().splitlines()[-1] for user in users]


MODES = ["embedded", "scale-out"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_redis_restart_during_20_streaming_turns_closes_no_socket_and_every_final_arrives(
    tmp_path: Path, mode: str, request
):
    alice, bob = tokens(tmp_path, mode, request, "alice", "bob")
    async with (
        PrivateRedis() as redis,
        LocalSSEServer([streamed_answer()], repeat_last=True) as llm,
        picobot(mode, tmp_path, redis.url, llm, request) as ws_url,
    ):
        clients = [await connect(ws_url, alice), await connect(ws_url, bob)]
        dialogs = {
            client: [await client.new_dialog() for _ in range(DIALOGS_PER_CLIENT)] for client in clients
        }
        for client, sessions in dialogs.items():
            for i, session_id in enumerate(sessions):
                await client.send(
                    {
                        "type": "message",
                        "content": "Say it",
                        "session_id": session_id,
                        "client_msg_id": f"t-{i}",
                    }
                )
        for client, sessions in dialogs.items():  # all 20 turns stream...
            await client.wait_for(lambda c=client, s=sessions: all(c.streaming(x) for x in s))

        await redis.restart(down_seconds=0.5)  # ...when Redis restarts (empty)

        late = await connect(ws_url, alice)  # the first handshake after the restart: no 500
        for client, sessions in dialogs.items():
            for session_id in sessions:
                final = await client.wait_for(lambda c=client, s=session_id: c.final(s))
                assert final["status"] == "completed" and answer_of(final) == ANSWER
                await client.wait_for(lambda c=client, s=session_id: c.committed(s))
        assert all(client.closed is None for client in [*clients, late])

        # New turns work without restarting PicoBot, live again: the groups were re-joined.
        for client, sessions in dialogs.items():
            await send_and_finish(client, sessions[0], "after-restart", after=1)
            assert any(t["status"] == "running" for t in client.turns(sessions[0])[-3:])
        assert all(client.closed is None for client in [*clients, late])
        for client in [*clients, late]:
            await client.close()


@pytest.mark.parametrize("mode", MODES)
async def test_redis_down_for_seconds_then_back_keeps_sockets_and_turns_and_handshakes_succeed(
    tmp_path: Path, mode: str, request
):
    (alice,) = tokens(tmp_path, mode, request, "alice")
    async with (
        PrivateRedis() as redis,
        LocalSSEServer([streamed_answer()], repeat_last=True) as llm,
        picobot(mode, tmp_path, redis.url, llm, request) as ws_url,
    ):
        client = await connect(ws_url, alice)
        running, during, after = [await client.new_dialog() for _ in range(3)]
        await client.send(
            {"type": "message", "content": "Say it", "session_id": running, "client_msg_id": "r"}
        )
        await client.wait_for(lambda: client.streaming(running))

        await redis.stop()
        # While Redis is down: a new socket is accepted, and a message is acknowledged and answered
        # (the worker's inbox scan finds it; the final is rebuilt from storage).
        other = await connect(ws_url, alice)
        await send_and_finish(other, during, "during-outage", after=0)
        await asyncio.sleep(2)  # down for several seconds in all
        await redis.start()

        final = await client.wait_for(lambda: client.final(running))
        assert final["status"] == "completed" and answer_of(final) == ANSWER
        await send_and_finish(client, after, "after-outage", after=0)
        # The socket that connected while Redis was down joined its chat's group once it was back:
        # it sees the new turn live, though it did not send it.
        await other.wait_for(lambda: other.final(after))
        assert any(t["status"] == "running" for t in other.turns(after))
        assert client.closed is None and other.closed is None
        await client.close()
        await other.close()
