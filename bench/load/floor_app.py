"""The Channels floor: Daphne + a trivial Channels consumer, with no PicoBot logic.

    BENCH_FLOOR_CHUNKS=200 BENCH_FLOOR_RATE=20 daphne -b 127.0.0.1 -p PORT bench.load.floor_app:application

Per connection: ``ready`` at once; on a ``message`` frame an ``ack``, then one ``turn_updated``
frame per chunk at the rate, shaped like PicoBot's snapshots (one assistant block whose text grows
by ``common.chunk_text(k)``), each serialised once and sent by the consumer itself (``self.send``:
Daphne and Channels' consumer, no layer hop — ``layer_floor.py`` measures the layer alone); then
the terminal snapshot and a ``turn_committed`` with the full text. ``seen`` frames are read and
ignored (no credit window), through Channels' stock dispatch. ``GET /times`` returns and clears
``{"times": {key: [t_0, ...]}}`` (``time.time()`` just before each chunk's send), keyed by the
``[[bench:KEY]]`` tag of the message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.load.floor_settings")
import django  # noqa: E402

django.setup()

from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from bench.load.common import chunk_text, find_key  # noqa: E402

CHUNKS = int(os.environ.get("BENCH_FLOOR_CHUNKS", "200"))
INTERVAL = 1.0 / float(os.environ.get("BENCH_FLOOR_RATE", "20"))
TIMES: dict[str, list[float]] = {}


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class FloorConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        self.task: asyncio.Task | None = None
        await self.accept()
        await self.send(text_data=_dumps({"type": "ready", "protocol": 1, "running": []}))

    async def disconnect(self, code: int) -> None:
        if self.task is not None:
            self.task.cancel()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        frame = json.loads(text_data or "{}")
        if frame.get("type") == "message" and self.task is None:
            key = find_key(frame.get("content", "")) or uuid.uuid4().hex
            await self.send(
                text_data=_dumps(
                    {
                        "type": "ack",
                        "client_msg_id": frame.get("client_msg_id"),
                        "session_id": "floor",
                        "message_id": key,
                        "queued": 0,
                    }
                )
            )
            self.task = asyncio.ensure_future(self.produce(key, frame.get("content", "")))

    async def produce(self, key: str, content: str) -> None:
        stamps: list[float] = []
        TIMES[key] = stamps
        turn_id = uuid.uuid4().hex
        parts: list[str] = []
        loop = asyncio.get_running_loop()
        start = loop.time()
        turn = {
            "id": turn_id,
            "session_id": "floor",
            "message_id": key,
            "revision": 0,
            "status": "running",
            "phase": "responding",
            "blocks": [],
            "usage": None,
            "error": None,
        }
        for k in range(CHUNKS):
            delay = start + k * INTERVAL - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            stamps.append(time.time())
            parts.append(chunk_text(k))
            turn["revision"] = k + 1
            turn["blocks"] = [{"type": "assistant", "id": "a0", "iteration": 0, "text": "".join(parts)}]
            await self.send(text_data='{"type":"turn_updated","turn":' + _dumps(turn) + "}")
        turn["revision"] = CHUNKS + 1
        turn["status"] = "completed"
        turn["phase"] = "finalizing"
        turn["usage"] = {"input_tokens": 50, "output_tokens": CHUNKS}
        await self.send(text_data='{"type":"turn_updated","turn":' + _dumps(turn) + "}")
        committed = {
            "type": "turn_committed",
            "session_id": "floor",
            "history_revision": 2,
            "messages": [
                {"id": uuid.uuid4().hex, "seq": 1, "role": "user", "content": content},
                {
                    "id": key,
                    "seq": 2,
                    "role": "assistant",
                    "content": "".join(parts),
                    "completion_status": "completed",
                },
            ],
        }
        await self.send(text_data=_dumps(committed))


async def http_app(scope: dict, receive, send) -> None:  # noqa: ANN001 - raw ASGI
    if scope["type"] != "http":
        return
    with contextlib.suppress(Exception):
        while (await receive()).get("more_body"):
            pass
    if scope["path"] == "/times":
        body = json.dumps({"times": TIMES}).encode()
        TIMES.clear()
        status = 200
    else:
        body, status = b'{"ok":true}', 200
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


application = ProtocolTypeRouter(
    {"http": http_app, "websocket": URLRouter([path("ws/chat/", FloorConsumer.as_asgi())])}
)
