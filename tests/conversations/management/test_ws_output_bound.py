"""``manage.py serve`` bounds each WebSocket's unread output: a client that asks for 300 histories
and never reads is closed with 4408 once its unsent output passes ``PICOBOT_WS_MAX_UNSENT_BYTES``;
another client of the same user goes on."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
from urllib.parse import urlsplit

import pytest
import websockets

from conversations.management.commands._ws_guard import CLOSE_NOT_READING
from tests.e2e.serve_process import ServeProcess, manage

pytestmark = [pytest.mark.e2e]

BOUND = 256 * 1024


def masked_text_frame(text: str) -> bytes:
    payload = text.encode()
    mask = os.urandom(4)
    size = len(payload)
    head = (
        struct.pack("!BB", 0x81, 0x80 | size) if size < 126 else struct.pack("!BBH", 0x81, 0x80 | 126, size)
    )
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def open_non_reader(url: str, token: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A WebSocket over a socket with a 4 KiB receive buffer, so unread frames pile up server-side."""
    parts = urlsplit(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (parts.hostname, parts.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET /ws/chat/?token={token} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    assert b" 101 " in head.split(b"\r\n", 1)[0]
    return reader, writer


async def until(client, kind: str, timeout: float = 30) -> dict:
    async with asyncio.timeout(timeout):
        while True:
            frame = json.loads(await client.recv())
            if frame["type"] == kind:
                return frame


async def test_a_socket_that_never_reads_is_closed_at_the_bound_and_the_others_go_on(tmp_path):
    async with ServeProcess(tmp_path, {"PICOBOT_WS_MAX_UNSENT_BYTES": str(BOUND)}) as server:
        token = (await asyncio.to_thread(manage, tmp_path, "createtoken", "alice")).strip().splitlines()[-1]
        url = f"{server.ws_url}?token={token}"
        async with websockets.connect(url, max_size=None) as reader_client:
            session = (await until(reader_client, "ready"))["active_session_id"]
            for n in range(4):  # ~120 KB of history: each history answer is that large
                await reader_client.send(
                    json.dumps(
                        {"type": "message", "content": f"{n} " + "x" * 30_000, "client_msg_id": f"big-{n}"}
                    )
                )
                await until(reader_client, "turn_committed")

            reader, writer = await open_non_reader(server.url, token)
            request = masked_text_frame(json.dumps({"type": "history", "session_id": session, "limit": 200}))
            for _ in range(300):
                writer.write(request)
                await writer.drain()

            for _ in range(300):  # the server's log, polled for up to 60 s
                closed = [line for line in server.output if f"closed with {CLOSE_NOT_READING}" in line]
                if closed:
                    break
                await asyncio.sleep(0.2)
            else:
                pytest.fail("the non-reading socket was never closed:\n" + "".join(server.output[-20:]))
            line = closed[0]
            assert f"bound {BOUND} bytes" in line

            # The other socket of the same user is unaffected.
            await reader_client.send(
                json.dumps({"type": "message", "content": "still here?", "client_msg_id": "after"})
            )
            assert (await until(reader_client, "ack"))["client_msg_id"] == "after"
            await until(reader_client, "turn_committed")

            # The non-reading socket was dropped: reading it now ends (EOF or reset), never hangs.
            async with asyncio.timeout(60):
                try:
                    while await reader.read(1 << 16):
                        pass
                except ConnectionError:
                    pass
            writer.close()


def test_a_closed_socket_gives_its_unsent_bytes_back_at_once(monkeypatch):
    """The transport and the protocol refer to each other: without this the unsent bytes of a
    dropped socket would stay until a full garbage collection (up to the bound per socket)."""
    from daphne.ws_protocol import WebSocketProtocol

    from conversations.management.commands._ws_guard import OutputBoundedWebSocketProtocol, unsent_bytes

    closed: list[int] = []
    monkeypatch.setattr(WebSocketProtocol, "onClose", lambda self, clean, code, reason: closed.append(code))

    class Transport:  # what Twisted's TCP transport holds after connectionLost
        connected = 0
        dataBuffer = b"x" * 1000
        offset = 10
        _tempDataBuffer = [b"y" * 500]
        _tempDataLen = 500

    protocol = OutputBoundedWebSocketProtocol.__new__(OutputBoundedWebSocketProtocol)
    protocol.transport = transport = Transport()
    assert unsent_bytes(transport) == 1490
    protocol.onClose(False, 1006, None)
    assert unsent_bytes(transport) == 0 and transport._tempDataBuffer == [] and closed == [1006]

    transport.connected, transport.dataBuffer = 1, b"still being written"  # not closed yet: kept
    protocol.onClose(True, 1000, None)
    assert transport.dataBuffer == b"still being written"


def test_a_frame_of_an_open_socket_is_written_at_once_and_the_rest_buffered_in_order():
    """``sendData``: with nothing queued before it a frame goes straight to the socket (no
    register-for-write and loop pass per frame); what the kernel does not take, and every frame
    behind buffered bytes, goes through Twisted's ``write`` so the order holds."""
    from autobahn.websocket.protocol import WebSocketProtocol as Autobahn

    from conversations.management.commands._ws_guard import OutputBoundedWebSocketProtocol, unsent_bytes

    class Transport:  # Twisted's TCP transport, with a kernel that takes ``room`` bytes
        connected, disconnecting, _writeDisconnected = 1, False, False

        def __init__(self, room: int) -> None:
            self.room, self.wire = room, b""
            self.dataBuffer, self.offset, self._tempDataBuffer, self._tempDataLen = b"", 0, [], 0

        def writeSomeData(self, data: bytes) -> int:  # noqa: N802 - Twisted's name
            taken = bytes(data[: self.room])
            self.room -= len(taken)
            self.wire += taken
            return len(taken)

        def write(self, data: bytes) -> None:
            self._tempDataBuffer.append(bytes(data))
            self._tempDataLen += len(data)

    class Stats:
        outgoingOctetsWireLevel = 0

    protocol = OutputBoundedWebSocketProtocol.__new__(OutputBoundedWebSocketProtocol)
    protocol.transport = transport = Transport(room=10)
    protocol.state, protocol.send_queue, protocol.logOctets = Autobahn.STATE_OPEN, [], False
    protocol.trafficStats = Stats()
    protocol.sendData(b"0123456789ab")
    assert transport.wire == b"0123456789" and transport._tempDataBuffer == [b"ab"]
    protocol.sendData(b"cd")  # bytes are waiting: behind them, never ahead
    assert transport.wire == b"0123456789" and b"".join(transport._tempDataBuffer) == b"abcd"
    assert unsent_bytes(transport) == 4 and protocol.trafficStats.outgoingOctetsWireLevel == 14

    transport.room, transport._tempDataBuffer, transport._tempDataLen = 100, [], 0
    protocol.sendData(b"whole")
    assert transport.wire.endswith(b"whole") and unsent_bytes(transport) == 0
    transport.connected = 0  # a closed socket: Twisted's write decides (it drops the bytes)
    protocol.sendData(b"gone")
    assert not transport.wire.endswith(b"gone") and transport._tempDataBuffer == [b"gone"]


def test_a_socket_closing_with_a_megabyte_unsent_gives_the_memory_back_to_the_system(monkeypatch):
    """glibc keeps freed heap pages mapped: after such a close, ``malloc_trim(0)`` runs (at most
    once a second), so the server's RSS goes back down."""
    from daphne.ws_protocol import WebSocketProtocol

    from conversations.management.commands import _ws_guard

    trims: list[int] = []
    monkeypatch.setattr(WebSocketProtocol, "onClose", lambda self, clean, code, reason: None)
    monkeypatch.setattr(_ws_guard, "_malloc_trim", trims.append)
    monkeypatch.setattr(_ws_guard, "_last_trim", 0.0)

    def closed_socket(unsent: int) -> None:
        class Transport:
            connected, offset, _tempDataLen = 0, 0, 0
            dataBuffer, _tempDataBuffer = b"x" * unsent, []

        protocol = _ws_guard.OutputBoundedWebSocketProtocol.__new__(_ws_guard.OutputBoundedWebSocketProtocol)
        protocol.transport = Transport()
        protocol.onClose(False, 1006, None)

    closed_socket(10_000)
    assert trims == [], "a small buffer: nothing worth a trim"
    closed_socket(_ws_guard.TRIM_AFTER_BYTES)
    closed_socket(_ws_guard.TRIM_AFTER_BYTES)
    assert trims == [0], "once: the second close fell within the interval"
    assert _ws_guard._load_malloc_trim() is not None, "this machine's libc is glibc"
