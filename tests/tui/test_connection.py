"""tui.connection against a small local websockets server: Bearer token, 4401, backoff, resend."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from tui.connection import ChatConnection, ConnectionState, backoff_delay


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
