"""The long connection end to end: the real SDK client (``lark_oapi.ws.Client`` 1.7.5) in its thread,
against a fake long-connection endpoint on 127.0.0.1 (FEISHU.md §5).

The fake answers ``POST /callback/ws/endpoint`` like the platform (``code`` 0, ``data.URL`` with
``device_id``/``service_id``, ``data.ClientConfig``) and serves the websocket: it sends event frames
built with the SDK's own protobuf ``Frame`` and reads the client's acks. It never answers the SDK's
ping frames: 1.7.5 does not wait for pongs (a pong only carries a new ClientConfig), and websocket
keepalive pings are answered by the ``websockets`` server itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from lark_oapi.ws.pb.pbbp2_pb2 import Frame
from websockets.asyncio.server import ServerConnection, serve

from conversations.feishu import long_connection
from conversations.feishu.long_connection import LongConnection

APP_ID = "cli_long_connection_test"
APP_SECRET = "long-connection-secret-1234"
SERVICE_ID = 7
WAIT = 15.0  # generous bound for anything that should take well under a second (the first SDK import ~3 s)

EVENT = json.dumps(
    {
        "schema": "2.0",
        "header": {
            "event_id": "ev_5f1c",
            "event_type": "im.message.receive_v1",
            "create_time": "1718000000000",
            "token": "",
            "app_id": APP_ID,
            "tenant_key": "tk_1",
        },
        "event": {
            "sender": {"sender_id": {"open_id": "ou_user", "union_id": "on_user"}, "sender_type": "user"},
            "message": {
                "message_id": "om_1",
                "create_time": "1718000000000",
                "chat_id": "oc_1",
                "chat_type": "p2p",
                "message_type": "text",
                "content": json.dumps({"text": "你好, long connection"}, ensure_ascii=False),
            },
        },
    },
    ensure_ascii=False,
).encode()


class FakeLongConnectionEndpoint:
    """The endpoint (HTTP, in a thread) and the websocket server (on the test's loop).

    ``endpoint_bodies``: the JSON bodies POSTed to the endpoint; ``endpoint_reply``: what it answers;
    ``connections``: each websocket the SDK opened, in order."""

    def __init__(self, ws_port: int) -> None:
        url = f"ws://127.0.0.1:{ws_port}/ws/v2?fpid=493&aid=552564&device_id=dev_1&service_id={SERVICE_ID}&ticket=t"
        config = {"PingInterval": 120, "ReconnectCount": -1, "ReconnectInterval": 120, "ReconnectNonce": 30}
        self.endpoint_reply: dict[str, Any] = {
            "code": 0,
            "msg": "ok",
            "data": {"URL": url, "ClientConfig": config},
        }
        self.endpoint_bodies: list[dict[str, Any]] = []
        self.connections: asyncio.Queue[ServerConnection] = asyncio.Queue()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                found = self.path == "/callback/ws/endpoint"
                if found:
                    fake.endpoint_bodies.append(json.loads(body))
                reply = json.dumps(fake.endpoint_reply if found else {"code": 404}).encode()
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.domain = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True).start()

    async def serve_ws(self, ws: ServerConnection) -> None:
        await self.connections.put(ws)
        await ws.wait_closed()

    async def next_connection(self) -> ServerConnection:
        return await asyncio.wait_for(self.connections.get(), WAIT)


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeLongConnectionEndpoint]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # requests (the SDK's endpoint POST) honours proxy variables
    holder: list[FakeLongConnectionEndpoint] = []

    async def handler(ws: ServerConnection) -> None:
        await holder[0].serve_ws(ws)

    async with serve(handler, "127.0.0.1", 0) as server:
        holder.append(FakeLongConnectionEndpoint(server.sockets[0].getsockname()[1]))
        yield holder[0]
        holder[0].http.shutdown()
        holder[0].http.server_close()


@pytest.fixture
async def connect(
    fake: FakeLongConnectionEndpoint,
) -> AsyncIterator[Callable[..., Awaitable[LongConnection]]]:
    """Starts a LongConnection on the fake (stopped at teardown); returns once ``start()`` returned."""
    started: list[LongConnection] = []

    async def start(on_event: Callable[[bytes], Awaitable[None]], **kwargs: Any) -> LongConnection:
        conn = LongConnection(
            APP_ID,
            APP_SECRET,
            domain=fake.domain,
            on_event=on_event,
            loop=asyncio.get_running_loop(),
            **kwargs,
        )
        started.append(conn)
        conn.start()
        return conn

    yield start
    for conn in started:
        await asyncio.to_thread(conn.stop, 5.0)


def event_frame(payload: bytes, message_id: str) -> bytes:
    frame = Frame(SeqID=1, LogID=1, service=SERVICE_ID, method=1, payload=payload)  # method 1: DATA
    headers = {"type": "event", "message_id": message_id, "trace_id": "tr_1", "sum": "1", "seq": "0"}
    for key, value in headers.items():
        frame.headers.add(key=key, value=value)
    return frame.SerializeToString()


async def receive_frame(ws: ServerConnection, *, data: bool) -> tuple[Frame, dict[str, str]]:
    """The next frame from the client of that kind (data: acks; control: pings), skipping others."""
    while True:
        frame = Frame()
        frame.ParseFromString(await asyncio.wait_for(ws.recv(), WAIT))
        if frame.method == (1 if data else 0):
            return frame, {h.key: h.value for h in frame.headers}


async def send_event(ws: ServerConnection, message_id: str = "msg_1") -> dict[str, Any]:
    """Sends EVENT, returns the ack's decoded payload (its headers under ``"headers"``)."""
    await ws.send(event_frame(EVENT, message_id))
    ack, headers = await receive_frame(ws, data=True)
    assert headers["message_id"] == message_id
    return {**json.loads(ack.payload), "headers": headers}


async def ignore(payload: bytes) -> None:
    pass


async def wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_it_works_even_when_the_sdk_captured_the_running_main_loop_at_import(
    fake, connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lark_oapi.ws.client

    # What importing lark_oapi under Daphne does (upstream issues #96, #133).
    monkeypatch.setattr(lark_oapi.ws.client, "loop", asyncio.get_running_loop())

    conn = await connect(ignore)
    ws = await fake.next_connection()
    await wait_until(lambda: conn.connected)

    assert lark_oapi.ws.client.loop is not asyncio.get_running_loop()
    assert (await send_event(ws))["code"] == 200
    assert fake.endpoint_bodies == [{"AppID": APP_ID, "AppSecret": APP_SECRET}]


async def test_an_event_reaches_on_event_on_the_main_loop_as_its_exact_bytes_and_is_acked_200(
    fake, connect
) -> None:
    received: list[tuple[bytes, int]] = []

    async def on_event(payload: bytes) -> None:
        received.append((payload, threading.get_ident()))

    await connect(on_event)
    ws = await fake.next_connection()
    ack = await send_event(ws)

    assert received == [(EVENT, threading.get_ident())]
    assert ack["code"] == 200
    assert "biz_rt" in ack["headers"]


async def test_on_event_raising_acks_500_so_the_platform_delivers_again(fake, connect) -> None:
    async def on_event(payload: bytes) -> None:
        raise RuntimeError("database is locked")

    await connect(on_event)
    ws = await fake.next_connection()

    assert (await send_event(ws))["code"] == 500
    assert (await send_event(ws, "msg_2"))["code"] == 500  # the connection keeps serving


async def test_a_slow_on_event_acks_500_after_the_handoff_timeout_and_is_cancelled(fake, connect) -> None:
    cancelled = asyncio.Event()

    async def on_event(payload: bytes) -> None:
        try:
            await asyncio.sleep(WAIT)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await connect(on_event, handoff_timeout=0.3)
    ws = await fake.next_connection()
    sent = time.monotonic()
    ack = await send_event(ws)

    assert ack["code"] == 500
    assert 0.3 <= time.monotonic() - sent < 5.0
    await asyncio.wait_for(cancelled.wait(), 5.0)


async def test_the_sdk_pings_at_once_and_stays_connected_without_pongs(fake, connect) -> None:
    conn = await connect(ignore)
    ws = await fake.next_connection()
    ping, headers = await receive_frame(ws, data=False)

    assert headers == {"type": "ping"} and ping.service == SERVICE_ID
    assert (await send_event(ws))["code"] == 200
    await wait_until(lambda: conn.connected)


async def test_stop_ends_the_thread_and_closes_the_websocket_without_reconnecting(fake, connect) -> None:
    conn = await connect(ignore)
    ws = await fake.next_connection()
    await wait_until(lambda: conn.connected)
    await asyncio.to_thread(conn.stop, 5.0)

    assert not conn.running and not conn.connected
    await asyncio.wait_for(ws.wait_closed(), 5.0)
    assert fake.connections.empty() and len(fake.endpoint_bodies) == 1
    await asyncio.to_thread(conn.stop, 5.0)  # a second stop is harmless


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.1])
async def test_stop_at_any_moment_of_connecting_ends_the_thread(fake, connect, delay: float) -> None:
    conn = await connect(ignore)
    await asyncio.sleep(delay)
    await asyncio.to_thread(conn.stop, 5.0)

    assert not conn.running and not conn.connected


async def test_rejected_credentials_are_logged_without_the_secret_and_retried_until_stop(
    fake, connect, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(long_connection, "RETRY_FIRST_SECONDS", 0.05)
    fake.endpoint_reply = {"code": 10014, "msg": "app secret invalid"}

    with caplog.at_level(logging.WARNING):
        conn = await connect(ignore)
        await wait_until(lambda: len(fake.endpoint_bodies) >= 3)
        assert conn.running and not conn.connected
        await asyncio.to_thread(conn.stop, 5.0)

    assert not conn.running
    retries = [
        r for r in caplog.records if r.name == long_connection.__name__ and "retrying" in r.getMessage()
    ]
    assert retries and "app secret invalid" in retries[0].getMessage()
    assert all(APP_SECRET not in r.getMessage() for r in caplog.records)


async def test_a_client_the_sdk_gave_up_on_is_started_anew(
    fake, connect, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A ClientException while the SDK reconnects ends its receive task for good (start() blocks on).
    monkeypatch.setattr(long_connection, "DOWN_RESTART_SECONDS", 0.2)
    monkeypatch.setattr(long_connection, "RETRY_FIRST_SECONDS", 0.05)
    ok = fake.endpoint_reply
    ok["data"]["ClientConfig"]["ReconnectNonce"] = 0  # reconnect at once

    conn = await connect(ignore)
    first = await fake.next_connection()
    await wait_until(lambda: conn.connected)
    fake.endpoint_reply = {"code": 1000040350, "msg": "exceed connection limit"}
    await first.close()
    await wait_until(lambda: len(fake.endpoint_bodies) == 2)
    fake.endpoint_reply = ok
    second = await fake.next_connection()

    assert (await send_event(second))["code"] == 200
    assert any("restarting the client" in r.getMessage() for r in caplog.records)


@pytest.mark.django_db(transaction=True)
async def test_the_long_connection_mode_end_to_end_one_event_one_answer(feishu_server, start_worker) -> None:
    """``PICOBOT_FEISHU_MODE=long_connection``: the worker starts the SDK client; an event over the
    websocket becomes a turn whose answer reaches the chat through the Open API; the same event
    delivered again is acked and answered by nothing."""
    from conversations.feishu.platform import uninstall
    from providers.testing import ScriptedProvider, script_text
    from tests.conversations.feishu.conftest import CHAT, make_platform, message_event
    from tests.conversations.feishu.test_end_to_end import delivered

    connections: asyncio.Queue[ServerConnection] = asyncio.Queue()

    async def handler(ws: ServerConnection) -> None:
        await connections.put(ws)
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        url = f"ws://127.0.0.1:{port}/ws/v2?device_id=dev_1&service_id={SERVICE_ID}&ticket=t"
        config = {"PingInterval": 120, "ReconnectCount": -1, "ReconnectInterval": 120, "ReconnectNonce": 30}
        feishu_server.ws_endpoint_reply = {
            "code": 0,
            "msg": "ok",
            "data": {"URL": url, "ClientConfig": config},
        }
        platform = make_platform(feishu_server, mode="long_connection", verification_token="")
        try:
            await start_worker(ScriptedProvider([script_text("Hello over the long connection.")]))
            ws = await asyncio.wait_for(connections.get(), WAIT)
            user = feishu_server.api.user_message(CHAT, "hi")
            payload = json.dumps(message_event(user, "hi", token="")).encode()
            await ws.send(event_frame(payload, "frame_1"))
            ack, _ = await receive_frame(ws, data=True)
            assert json.loads(ack.payload)["code"] == 200
            await delivered(user)
            await ws.send(event_frame(payload, "frame_2"))  # the platform redelivers the same message
            ack, _ = await receive_frame(ws, data=True)
            assert json.loads(ack.payload)["code"] == 200
            await asyncio.sleep(0.3)
            (bot,) = feishu_server.api.bot_messages(CHAT)
            assert bot.reply_to == user and bot.text == "Hello over the long connection."
            assert platform.long_connection is not None and platform.long_connection.connected
        finally:
            await platform.stop(timeout=5)
            uninstall()
        assert platform.long_connection is None
