"""tui.connection against a small local websockets server: Bearer token, 4401, backoff, resend."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from tui.connection import ChatConnection, ConnectionState, backoff_delay, close_retry_after


@pytest.mark.parametrize(("attempt", "low", "high"), [(0, 0.375, 0.625), (1, 0.75, 1.25), (10, 11.25, 18.75)])
def test_backoff_doubles_from_half_a_second_to_fifteen_with_a_quarter_of_jitter(
    attempt: int, low: float, high: float
):
    assert backoff_delay(attempt, lambda: 0.0) == low
    assert backoff_delay(attempt, lambda: 1.0) == high


async def local_server(handler: Callable[[ServerConnection], Any]) -> AsyncIterator[str]:
    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/ws/chat/"


async def test_a_4401_close_ends_in_the_refused_state_without_retrying():
    headers: list[str | None] = []

    async def refuse(ws: ServerConnection) -> None:
        headers.append(ws.request.headers.get("Authorization"))
        await ws.send(
            json.dumps({"type": "error", "code": "unauthorized", "message": "authentication required"})
        )
        await ws.close(4401)

    frames: list[dict[str, Any]] = []
    states: list[ConnectionState] = []

    async def on_frame(frame: dict[str, Any]) -> None:
        frames.append(frame)

    async for url in local_server(refuse):
        conn = ChatConnection(url, "pb_bad", on_frame, states.append)
        await asyncio.wait_for(conn.run(), 20)
    assert headers == ["Bearer pb_bad"]
    assert [s.kind for s in states] == ["connecting", "connected", "refused"]
    assert frames[0]["code"] == "unauthorized"


@pytest.mark.parametrize(
    ("code", "reason", "wait"),
    [
        (4429, "too many failed sign-ins from this address; retry in 40 s", 40.0),
        (4429, "", 60.0),
        (1011, "retry in 40 s", 0.0),
        (None, None, 0.0),
    ],
)
def test_a_4429_close_asks_for_the_wait_its_reason_names(code, reason, wait):
    assert close_retry_after(code, reason) == wait


async def test_a_4429_close_waits_the_named_seconds_before_reconnecting():
    async def too_many(ws: ServerConnection) -> None:
        await ws.send(json.dumps({"type": "error", "code": "too_many_requests", "retry_after": 7}))
        await ws.close(4429)  # as under Daphne: no reason

    states: list[ConnectionState] = []

    async def on_frame(frame: dict[str, Any]) -> None:
        pass

    def on_state(state: ConnectionState) -> None:
        states.append(state)
        if state.kind == "reconnecting":
            asyncio.get_running_loop().create_task(conn.close())

    async for url in local_server(too_many):
        conn = ChatConnection(url, "pb_x", on_frame, on_state, rng=lambda: 0.0)
        await asyncio.wait_for(conn.run(), 20)
    waiting = [s for s in states if s.kind == "reconnecting"][0]
    assert waiting.retry_in == 7.0, "not the 0.375 s of the first backoff"
    assert "retry in 7 s" in waiting.detail


async def test_a_dropped_connection_reconnects_and_frames_flow_again():
    accepted = 0

    async def drop_first(ws: ServerConnection) -> None:
        nonlocal accepted
        accepted += 1
        await ws.send(json.dumps({"type": "ready", "n": accepted}))
        if accepted == 1:
            await ws.close(1011)
            return
        async for message in ws:
            await ws.send(json.dumps({"type": "pong", "nonce": json.loads(message)["nonce"]}))

    frames: list[dict[str, Any]] = []
    states: list[ConnectionState] = []
    ponged = asyncio.Event()
    conn: ChatConnection

    async def on_frame(frame: dict[str, Any]) -> None:
        frames.append(frame)
        if frame["type"] == "pong":
            ponged.set()
        if frame["type"] == "ready" and frame["n"] == 2:
            assert await conn.send({"type": "ping", "nonce": "x"})

    async for url in local_server(drop_first):
        conn = ChatConnection(url, "pb_ok", on_frame, states.append, rng=lambda: 0.0)
        task = asyncio.ensure_future(conn.run())
        await asyncio.wait_for(ponged.wait(), 20)
        await conn.close()
        await task
    kinds = [s.kind for s in states]
    assert kinds[:4] == ["connecting", "connected", "reconnecting", "connecting"] and kinds[-1] == "closed"
    assert states[2].retry_in == 0.375 and "1011" in states[2].detail
    assert [f["type"] for f in frames] == ["ready", "ready", "pong"]


async def test_send_while_disconnected_returns_false():
    conn = ChatConnection("ws://127.0.0.1:9/ws/chat/", "t", lambda f: asyncio.sleep(0), lambda s: None)
    assert await conn.send({"type": "ping"}) is False
