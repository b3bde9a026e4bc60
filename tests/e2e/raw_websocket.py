"""A raw WebSocket client over asyncio streams, for frames a well-behaved library will not send.

``RawWebSocket.connect(url, token)`` performs the RFC 6455 handshake; ``send_frame`` writes one
masked frame; ``send_streamed`` writes a frame header declaring ``length`` bytes and then streams
the payload in pieces, so a test can send a 100 MiB frame without holding it. ``recv_frame`` reads
one server frame (``(opcode, payload)``); a TCP reset surfaces as ``ConnectionResetError``.
The mask key is all zeros (allowed by RFC 6455 §5.3): payload bytes go out as given.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
from urllib.parse import urlsplit

TEXT, BINARY, CONTINUATION, CLOSE, PING, PONG = 0x1, 0x2, 0x0, 0x8, 0x9, 0xA
_ZERO_MASK = b"\x00\x00\x00\x00"


def frame_header(opcode: int, length: int, *, fin: bool = True) -> bytes:
    """A masked client frame's header for a payload of ``length`` bytes."""
    first = (0x80 if fin else 0) | opcode
    if length < 126:
        head = struct.pack("!BB", first, 0x80 | length)
    elif length < 1 << 16:
        head = struct.pack("!BBH", first, 0x80 | 126, length)
    else:
        head = struct.pack("!BBQ", first, 0x80 | 127, length)
    return head + _ZERO_MASK


class RawWebSocket:
    """One client connection; build it with :meth:`connect`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, url: str, token: str) -> RawWebSocket:
        """Open ``ws://host:port/path`` with a Bearer token; raises ``ConnectionError`` on any
        answer but 101."""
        parts = urlsplit(url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Authorization: Bearer {token}\r\n\r\n"
        )
        writer.write(request.encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            writer.close()
            raise ConnectionError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
        return cls(reader, writer)

    async def send_frame(self, opcode: int, payload: bytes, *, fin: bool = True) -> None:
        self.writer.write(frame_header(opcode, len(payload), fin=fin) + payload)
        await self.writer.drain()

    async def send_text(self, frame: dict) -> None:
        await self.send_frame(TEXT, json.dumps(frame).encode())

    async def send_streamed(
        self, opcode: int, length: int, piece: bytes = b"a" * (1 << 20), *, fin: bool = True
    ) -> None:
        """One frame of ``length`` bytes, written ``piece`` by ``piece`` (the last one cut)."""
        self.writer.write(frame_header(opcode, length, fin=fin))
        left = length
        while left > 0:
            self.writer.write(piece[:left])
            left -= min(left, len(piece))
            await self.writer.drain()

    async def recv_frame(self) -> tuple[int, bytes]:
        """The next server frame (unfragmented, unmasked, as servers send)."""
        first, second = await self.reader.readexactly(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await self.reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await self.reader.readexactly(8))
        return first & 0x0F, await self.reader.readexactly(length)

    async def recv_json(self, kind: str | None = None) -> dict:
        """The next text frame as JSON (of type ``kind`` when given: others are skipped)."""
        while True:
            opcode, payload = await self.recv_frame()
            if opcode == CLOSE:
                raise ConnectionError(f"closed with {close_code(payload)}")
            if opcode != TEXT:
                continue
            frame = json.loads(payload)
            if kind is None or frame.get("type") == kind:
                return frame

    async def recv_close(self) -> int | None:
        """Read until the server's close frame and return its code (None: no code)."""
        while True:
            opcode, payload = await self.recv_frame()
            if opcode == CLOSE:
                return close_code(payload)

    def close(self) -> None:
        self.writer.close()


def close_code(payload: bytes) -> int | None:
    return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
