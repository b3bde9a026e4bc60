"""A local OpenAI-compatible streaming server for the load benchmark (its own process).

    python -m bench.load.llm_server --chunks 200 --rate 20

Plain ``asyncio.start_server`` HTTP/1.1 with keep-alive on 127.0.0.1 (port printed as
``LISTENING <port>``). ``POST /v1/chat/completions`` with ``stream: true`` answers with
``--chunks`` ``chat.completion.chunk`` SSE events (chunk k's delta is ``common.chunk_text(k)``),
one every ``1/--rate`` s on an absolute schedule, then a finish chunk with usage and
``data: [DONE]``, all in chunked transfer encoding. The request's key is the ``[[bench:KEY]]`` tag
in its last user message; the server records ``time.time()`` just before writing each chunk.
``GET /bench/times`` returns and clears ``{"times": {key: [t_0, ...]}, "requests": n,
"unkeyed": n, "aborted": n}``. A non-streaming request gets a short JSON completion.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time

from bench.load.common import LOOPBACK, chunk_text, find_key

_BASE = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "bench"}


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict) -> bytes:
    return _http_chunk(
        b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
    )


class Server:
    def __init__(self, chunks: int, rate: float) -> None:
        self.chunks = chunks
        self.interval = 1.0 / rate
        self.frames = []
        for k in range(chunks):
            delta = {"content": chunk_text(k)}
            if k == 0:
                delta = {"role": "assistant", **delta}
            self.frames.append(
                _event({**_BASE, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            )
        usage = {"prompt_tokens": 50, "completion_tokens": chunks, "total_tokens": 50 + chunks}
        self.tail = (
            _event({**_BASE, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage})
            + _http_chunk(b"data: [DONE]\n\n")
            + b"0\r\n\r\n"
        )
        self.times: dict[str, list[float]] = {}
        self.requests = 0
        self.unkeyed = 0
        self.aborted = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                if path.startswith("/bench/times"):
                    payload = json.dumps(
                        {
                            "times": self.times,
                            "requests": self.requests,
                            "unkeyed": self.unkeyed,
                            "aborted": self.aborted,
                        }
                    ).encode()
                    self.times = {}
                    await self._plain(writer, 200, payload)
                elif path.endswith("/chat/completions") and method == "POST":
                    await self._completion(writer, body)
                else:
                    await self._plain(writer, 404, b'{"error":{"message":"not found"}}')
                if headers.get("connection", "").lower() == "close":
                    return
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _plain(self, writer: asyncio.StreamWriter, status: int, payload: bytes) -> None:
        writer.write(
            b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, len(payload), payload)
        )
        await writer.drain()

    async def _completion(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        request = json.loads(body)
        self.requests += 1
        key = None
        for message in reversed(request.get("messages") or []):
            if message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, list):
                    content = " ".join(
                        str(part.get("text", "")) for part in content if isinstance(part, dict)
                    )
                key = find_key(str(content))
                break
        if key is None:
            self.unkeyed += 1
        if not request.get("stream"):
            text = "Bench title"
            payload = json.dumps(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "bench",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
                }
            ).encode()
            await self._plain(writer, 200, payload)
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        stamps: list[float] = []
        if key is not None:
            self.times[key] = stamps
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            for k, frame in enumerate(self.frames):
                delay = start + k * self.interval - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                stamps.append(time.time())
                writer.write(frame)
                await writer.drain()
            writer.write(self.tail)
            await writer.drain()
        except ConnectionError:
            self.aborted += 1
            raise


async def main_async(args: argparse.Namespace) -> None:
    server = Server(args.chunks, args.rate)
    listener = await asyncio.start_server(server.serve, LOOPBACK, args.port, backlog=4096, limit=1 << 22)
    port = listener.sockets[0].getsockname()[1]
    print(f"LISTENING {port}", flush=True)
    async with listener:
        # Bounded: the harness kills it; this is the backstop if the harness itself died.
        await asyncio.sleep(args.lifetime)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="chunks per second per request")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--lifetime", type=float, default=6 * 3600, help="exit after this many seconds")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main_async(args))
    sys.exit(0)


if __name__ == "__main__":
    main()
