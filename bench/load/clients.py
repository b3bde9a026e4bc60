"""The harness's WebSocket clients: a cheap streaming-dialog client, and a raw non-reading one.

A :class:`DialogClient` connects with ``?token=``, waits for ``ready``, sends one ``message`` when
told, answers every running ``turn_updated`` with ``seen`` (PROTOCOL "Flow control"), and notes for
each chunk k the receive time of the first snapshot whose answer text contains it (chunk k's text
has a fixed width, so a text of length L holds chunks 0 .. L // CHUNK_WIDTH - 1). It is done when
it has the terminal ``turn_updated`` and the ``turn_committed`` of its turn, or at its deadline.
Per frame it does one ``json.loads`` and a few dict lookups, nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import struct
import time
from dataclasses import dataclass, field

from websockets.asyncio.client import ClientConnection, connect

from bench.load.common import CHUNK_WIDTH, LOOPBACK, dumps, loads, tag


@dataclass
class DialogResult:
    index: int
    key: str
    connected: bool = False
    connect_error: str = ""
    sent_at: float = 0.0
    first_text_at: float = 0.0
    frames: int = 0  # turn_updated frames of our turn
    chunk_seen_at: list[float] = field(default_factory=list)
    terminal_status: str = ""
    terminal_error: str = ""
    committed: bool = False
    committed_at: float = 0.0
    committed_text: str | None = None
    errors: list[str] = field(default_factory=list)
    timed_out: bool = False
    closed_early: str = ""


class DialogClient:
    def __init__(self, index: int, url: str, token: str, key: str, chunks: int) -> None:
        self.result = DialogResult(index, key)
        self.url = f"{url}?token={token}"
        self.chunks = chunks
        self.ws: ClientConnection | None = None

    async def open(self, timeout: float) -> bool:
        """Connect and wait for ``ready``; False (with the reason) on failure."""
        try:
            async with asyncio.timeout(timeout):
                self.ws = await connect(
                    self.url,
                    compression=None,
                    max_size=1 << 24,
                    ping_interval=None,
                    proxy=None,
                    open_timeout=timeout,
                    close_timeout=5,
                    max_queue=None,
                )
                while True:
                    frame = loads(await self.ws.recv())
                    if frame.get("type") == "ready":
                        break
            self.result.connected = True
            return True
        except Exception as exc:  # noqa: BLE001 - reported per client
            self.result.connect_error = f"{type(exc).__name__}: {exc}"[:200]
            await self.close()
            return False

    async def run(self, send_at: float, timeout: float) -> DialogResult:
        """Send the message at wall-clock ``send_at`` and read until done or ``timeout`` s later."""
        result = self.result
        ws = self.ws
        if ws is None:
            return result
        seen_at = result.chunk_seen_at
        delay = send_at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        content = f"Bench dialog {tag(result.key)}: stream your answer."
        result.sent_at = time.time()
        got = 0
        turn_id = None
        terminal = False
        try:
            await ws.send(dumps({"type": "message", "content": content, "client_msg_id": result.key}))
            async with asyncio.timeout(timeout):
                while not (terminal and result.committed):
                    raw = await ws.recv()
                    now = time.time()
                    frame = loads(raw)
                    kind = frame.get("type")
                    if kind == "turn_updated":
                        turn = frame["turn"]
                        if turn_id is None:
                            turn_id = turn["id"]
                        elif turn["id"] != turn_id:
                            continue
                        result.frames += 1
                        length = 0
                        for block in turn["blocks"]:
                            if block.get("type") == "assistant":
                                length += len(block.get("text") or "")
                        have = min(length // CHUNK_WIDTH, self.chunks)
                        if have > got:
                            if not result.first_text_at:
                                result.first_text_at = now
                            seen_at.extend([now] * (have - got))
                            got = have
                        status = turn["status"]
                        if status == "running":
                            await ws.send(
                                dumps({"type": "seen", "turn_id": turn_id, "revision": turn["revision"]})
                            )
                        else:
                            terminal = True
                            result.terminal_status = status
                            result.terminal_error = str(turn.get("error") or "")
                    elif kind == "turn_committed":
                        for message in frame.get("messages") or []:
                            if message.get("role") == "assistant":
                                result.committed_text = (result.committed_text or "") + (
                                    message.get("content") or ""
                                )
                        result.committed = True
                        result.committed_at = result.committed_at or time.time()
                    elif kind == "error":
                        result.errors.append(f"{frame.get('code')}: {frame.get('message')}"[:200])
        except TimeoutError:
            result.timed_out = True
        except Exception as exc:  # noqa: BLE001 - a closed socket is a result, not a crash
            result.closed_early = f"{type(exc).__name__}: {exc}"[:200]
        return result

    async def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.ws.close(), 10)
            self.ws = None


async def open_all(clients: list[DialogClient], timeout: float, concurrency: int = 64) -> int:
    """Open every client (at most ``concurrency`` handshakes at a time); returns how many are ready."""
    gate = asyncio.Semaphore(concurrency)

    async def one(client: DialogClient) -> bool:
        async with gate:
            return await client.open(timeout)

    return sum(await asyncio.gather(*(one(c) for c in clients)))


async def close_all(clients: list[DialogClient]) -> None:
    gate = asyncio.Semaphore(128)

    async def one(client: DialogClient) -> None:
        async with gate:
            await client.close()

    await asyncio.gather(*(one(c) for c in clients))


async def connect_cycle(url: str, token: str, timeout: float) -> str:
    """Connect, wait for ``ready``, close. Returns "" or the error."""
    try:
        async with asyncio.timeout(timeout):
            async with connect(
                f"{url}?token={token}",
                compression=None,
                ping_interval=None,
                proxy=None,
                open_timeout=timeout,
                close_timeout=5,
            ) as ws:
                while loads(await ws.recv()).get("type") != "ready":
                    pass
        return ""
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"[:200]


# --- a raw WebSocket that stops reading ---------------------------------------------------------
class RawSocket:
    """A hand-made WebSocket client over a TCP socket with a small receive buffer, so that once
    the harness stops reading, the server's writes pile up on the server side."""

    def __init__(self) -> None:
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self, port: int, token: str, timeout: float = 30) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (LOOPBACK, port))
        self.reader, self.writer = await asyncio.open_connection(sock=sock, limit=1 << 16)
        key = base64.b64encode(os.urandom(16)).decode()
        self.writer.write(
            (
                f"GET /ws/chat/?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        async with asyncio.timeout(timeout):
            head = await self.reader.readuntil(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"handshake refused: {head[:80]!r}")

    async def send_text(self, text: str) -> None:
        assert self.writer is not None
        payload = text.encode()
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(head + mask + masked)
        await self.writer.drain()

    async def read_frame(self) -> dict:
        """One server frame as JSON (control frames are skipped)."""
        assert self.reader is not None
        while True:
            b0, b1 = await self.reader.readexactly(2)
            n = b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", await self.reader.readexactly(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", await self.reader.readexactly(8))
            payload = await self.reader.readexactly(n)
            if b0 & 0x0F == 1:
                return loads(payload)
            if b0 & 0x0F == 8:
                raise ConnectionError("server closed the WebSocket")

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()
            self.writer = None
