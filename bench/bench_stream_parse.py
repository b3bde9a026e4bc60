"""Stream-parsing throughput: our OpenAI-compatible provider vs the official SDK vs the floor.

Run by hand from the repo root (needs requirements-test.txt, for the ``openai`` SDK)::

    .venv/bin/python bench/bench_stream_parse.py            # both transports, 7 rounds
    .venv/bin/python bench/bench_stream_parse.py --transport http --repeat 3 --split 16384

One large, realistic ``chat.completion.chunk`` stream is generated once (DeepSeek-style
``reasoning_content``, then answer ``content`` with non-ASCII text, then six tool calls whose
arguments arrive in many small fragments, interleaved two by two, a finish chunk, a usage-only
chunk with ``choices: []``, ``[DONE]``). The *same bytes*, cut the same way (by default one
HTTP chunk per SSE event, as servers flush tokens), go to three consumers:

* ``ours``  - ``OpenAICompatProvider.stream()`` consumed fully into a ``StreamAccumulator`` (SSE
  framing, JSON, think-tag splitting, tool-call assembly, usage, timeouts, ``Done``);
* ``sdk``   - ``AsyncOpenAI().chat.completions.create(stream=True)`` iterated fully: the SDK's
  own SSE decoder and its ``ChatCompletionChunk`` objects (plus a few attribute reads per chunk
  to check the result; no ``ChatCompletionStreamState``, which is far slower);
* ``floor`` - ``httpx_sse.aconnect_sse(...).aiter_sse()`` + ``json.loads`` per event, nothing else.

Transports (each consumer has its own httpx2 client over the same one):

* ``http``   - a :class:`~providers.testing.LocalSSEServer` in a child process (real loopback
  HTTP/1.1, chunked encoding, h11 on our side); the server's CPU is not charged to the
  consumers, as with a real provider;
* ``memory`` - an ``httpx2.MockTransport`` that hands the pieces over in memory: parsing only.

Every consumer's result is checked against the generated stream before timing, so nothing can
get fast by being wrong. Rounds interleave the consumers; the table gives wire chunks per second
(best and median of ``--repeat`` rounds) and the ratios. Targets:
ours >= 5x the SDK and ours >= 0.5x the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2  # noqa: E402
from httpx_sse import aconnect_sse  # noqa: E402

from providers.base import StreamAccumulator  # noqa: E402
from providers.messages import Message  # noqa: E402
from providers.openai_compat import OpenAICompatProvider  # noqa: E402
from providers.testing import LocalSSEServer, SSEResponse, split_events, split_every  # noqa: E402
from providers.types import ProviderRequest  # noqa: E402

MODEL = "deepseek-v4-flash"
SSE_HEADERS = {"content-type": "text/event-stream"}
WORDS = [
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "we", "need", "to", "check",
    "whether", "parser", "handles", "streamed", "tokens", "café", "naïve", "東京", "数据", "résumé",
    "—", "“quoted”", "✓", "🌍", "{", "}", "<", "emoji",
]  # fmt: skip
CITIES = ["Paris", "Berlin", "東京", "São Paulo", "Reykjavík", "Nairobi"]


# --- the recorded stream ----------------------------------------------------------------------


def build_stream(n_chunks: int, seed: int = 3) -> tuple[bytes, dict[str, Any]]:
    """A realistic OpenAI-compatible SSE body of at least ``n_chunks`` data events.

    Returns:
        ``(body, expected)``: the bytes, and the result every consumer must reproduce
        (``text``, ``reasoning``, ``tool_calls`` as ``[(id, name, arguments_json)]``,
        ``usage`` as ``(prompt, completion)``, ``chunks``: the number of JSON events).
    """
    rng = random.Random(seed)
    base = {
        "id": "b1e23612-29d5-4f66-b185-fb61fdde0ac9",
        "object": "chat.completion.chunk",
        "created": 1786782776,
        "model": MODEL,
        "system_fingerprint": "fp_a26a7955944dc5c6",
    }
    events: list[str] = []

    def chunk(delta: dict[str, Any], finish: str | None = None) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        events.append(json.dumps({**base, "choices": [choice], "usage": None}, ensure_ascii=False))

    def token() -> str:
        return (" " if rng.random() < 0.8 else "") + rng.choice(WORDS)

    n_tools = 6
    n_reasoning = int(n_chunks * 0.45)
    n_text = int(n_chunks * 0.40)
    n_fragments = max(n_tools * 2, n_chunks - n_reasoning - n_text - 4)
    reasoning: list[str] = []
    text: list[str] = []
    chunk({"role": "assistant", "content": None, "reasoning_content": ""})
    for _ in range(n_reasoning):
        piece = token()
        reasoning.append(piece)
        chunk({"content": None, "reasoning_content": piece})
    for _ in range(n_text):
        piece = token()
        text.append(piece)
        chunk({"content": piece, "reasoning_content": None})

    # Several calls; each argument text is long and cut into small fragments, interleaved
    # two calls at a time the way parallel calls arrive from some servers.
    calls: list[tuple[str, str, str]] = []
    per_call = n_fragments // n_tools
    for i in range(n_tools):
        rows = [
            {"city": rng.choice(CITIES), "day": d, "note": " ".join(rng.choices(WORDS, k=4))}
            for d in range(per_call // 6 + 1)
        ]
        arguments = json.dumps({"query": f"weather #{i}", "rows": rows}, ensure_ascii=False)
        calls.append(
            (
                f"call_{i:02d}_{rng.getrandbits(40):010x}",
                "get_weather" if i % 2 else "search_notes",
                arguments,
            )
        )
    fragments: list[list[str]] = []
    for _, _, arguments in calls:
        cuts = sorted(rng.sample(range(1, len(arguments)), per_call - 1))
        fragments.append([arguments[a:b] for a, b in zip([0, *cuts], [*cuts, len(arguments)], strict=True)])
    for pair in range(0, n_tools, 2):
        for i in (pair, pair + 1):
            call_id, name, _ = calls[i]
            start = {
                "index": i,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            chunk({"tool_calls": [start]})
        for a, b in zip(fragments[pair], fragments[pair + 1], strict=True):
            chunk({"tool_calls": [{"index": pair, "function": {"arguments": a}}]})
            chunk({"tool_calls": [{"index": pair + 1, "function": {"arguments": b}}]})
    chunk({}, "tool_calls")
    completion_tokens = len(events)
    usage = {
        "prompt_tokens": 1234,
        "completion_tokens": completion_tokens,
        "total_tokens": 1234 + completion_tokens,
        "prompt_cache_hit_tokens": 1024,
        "completion_tokens_details": {"reasoning_tokens": n_reasoning},
    }
    events.append(json.dumps({**base, "choices": [], "usage": usage}))
    n_json = len(events)
    body = "".join(f"data: {e}\n\n" for e in events) + "data: [DONE]\n\n"
    expected = {
        "text": "".join(text),
        "reasoning": "".join(reasoning),
        "tool_calls": calls,
        "usage": (1234, completion_tokens),
        "chunks": n_json,
    }
    return body.encode(), expected


# --- the three consumers ------------------------------------------------------------------------
#
# Each consumer is set up (clients built, which for httpx2 means loading the CA bundle: ~25 ms)
# before the clock starts; only reading the stream is timed.

REQUEST = ProviderRequest([Message.system("You are terse."), Message.user("Weather, please.")])
Transport = httpx2.AsyncBaseTransport


class Ours:
    """Our provider, consumed fully into a StreamAccumulator."""

    def __init__(self, base_url: str, transport: Transport) -> None:
        self.provider = OpenAICompatProvider(base_url, "sk-bench", MODEL, max_retries=0, transport=transport)

    async def run(self) -> dict[str, Any]:
        acc = StreamAccumulator()
        async for chunk in self.provider.stream(REQUEST):
            acc.feed(chunk)
        result = acc.result()
        usage = result.usage
        return {
            "text": result.text,
            "reasoning": result.reasoning or "",
            "tool_calls": [(c.id, c.name, c.arguments_json) for c in result.tool_calls],
            "usage": (usage.input_tokens, usage.output_tokens) if usage else None,
        }

    async def aclose(self) -> None:
        await self.provider.aclose()


class SDK:
    """The official SDK's async streaming iterator (a light accumulation on its parsed chunk
    objects, only to check that it read everything)."""

    def __init__(self, base_url: str, transport: Transport) -> None:
        from openai import AsyncOpenAI

        self.client = AsyncOpenAI(
            base_url=base_url,
            api_key="sk-bench",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=transport, timeout=60.0),
        )

    async def run(self) -> dict[str, Any]:
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, list[str]] = {}
        usage = None
        stream = await self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Weather, please."}], stream=True
        )
        async for chunk in stream:
            if chunk.usage is not None:
                usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            if delta.content:
                text.append(delta.content)
            extra = getattr(delta, "reasoning_content", None)  # kept as a pydantic extra
            if extra:
                reasoning.append(extra)
            for fragment in delta.tool_calls or ():
                call = calls.setdefault(fragment.index, ["", "", ""])
                call[0] = call[0] or fragment.id or ""
                if fragment.function is not None:
                    call[1] = call[1] or fragment.function.name or ""
                    call[2] += fragment.function.arguments or ""
        return {
            "text": "".join(text),
            "reasoning": "".join(reasoning),
            "tool_calls": [tuple(calls[i]) for i in sorted(calls)],
            "usage": usage,
        }

    async def aclose(self) -> None:
        await self.client.close()


class Floor:
    """httpx-sse framing + ``json.loads`` per event, no normalisation; the result is the number
    of JSON events (all the floor can be checked on)."""

    def __init__(self, base_url: str, transport: Transport) -> None:
        self.url = base_url + "/chat/completions"
        self.client = httpx2.AsyncClient(transport=transport, timeout=60.0)

    async def run(self) -> dict[str, Any]:
        count = 0
        async with aconnect_sse(self.client, "POST", self.url, json={"stream": True}) as source:
            async for event in source.aiter_sse():
                if event.data == "[DONE]":
                    break
                json.loads(event.data)
                count += 1
        return {"chunks": count}

    async def aclose(self) -> None:
        await self.client.aclose()


CONSUMERS: dict[str, type[Ours | SDK | Floor]] = {"ours": Ours, "sdk": SDK, "floor": Floor}


# --- transports ---------------------------------------------------------------------------------


def _serve(pieces: list[bytes], conn: Any) -> None:
    """Child process: serve the pieces on every request until the parent says stop."""

    async def run() -> None:
        async with LocalSSEServer([SSEResponse(pieces=pieces)], repeat_last=True) as server:
            conn.send(server.base_url)
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)

    asyncio.run(run())


@asynccontextmanager
async def http_source(pieces: list[bytes]) -> AsyncIterator[tuple[str, Callable[[], Transport]]]:
    """A LocalSSEServer in a child process; yields ``(base_url, transport factory)`` (the
    transport httpx2 builds by default)."""
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(pieces, child), daemon=True)
    process.start()
    try:
        base_url = await asyncio.get_running_loop().run_in_executor(None, parent.recv)
        yield base_url, httpx2.AsyncHTTPTransport
    finally:
        parent.send("stop")
        process.join(5)
        if process.is_alive():
            process.kill()


@asynccontextmanager
async def memory_source(pieces: list[bytes]) -> AsyncIterator[tuple[str, Callable[[], Transport]]]:
    """An in-memory transport answering every request with the pieces."""

    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers=SSE_HEADERS, content=body())

    yield "http://bench.invalid/v1", lambda: httpx2.MockTransport(handler)


SOURCES = {"http": http_source, "memory": memory_source}


# --- measurement --------------------------------------------------------------------------------


def check(name: str, got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Fail loudly when a consumer did not read the stream exactly."""
    if name == "floor":
        assert got["chunks"] == expected["chunks"], f"floor saw {got['chunks']} events"
        return
    for key in ("text", "reasoning", "tool_calls", "usage"):
        assert got[key] == expected[key], f"{name}: {key} differs from the generated stream"


async def measure(
    transport: str, pieces: list[bytes], expected: dict[str, Any], repeat: int
) -> dict[str, list[float]]:
    """Seconds per full read of the stream, per consumer, ``repeat`` interleaved rounds."""
    seconds: dict[str, list[float]] = {name: [] for name in CONSUMERS}
    async with SOURCES[transport](pieces) as (base_url, make_transport):
        consumers = {name: cls(base_url, make_transport()) for name, cls in CONSUMERS.items()}
        try:
            for name, consumer in consumers.items():  # warm-up, and every result checked once
                check(name, await consumer.run(), expected)
            for _ in range(repeat):
                for name, consumer in consumers.items():
                    gc.collect()
                    started = time.perf_counter()
                    await consumer.run()
                    seconds[name].append(time.perf_counter() - started)
        finally:
            for consumer in consumers.values():
                await consumer.aclose()
    return seconds


def report(transport: str, seconds: dict[str, list[float]], n: int) -> None:
    best = {k: n / min(v) for k, v in seconds.items()}
    median = {k: n / statistics.median(v) for k, v in seconds.items()}
    print(f"\n[{transport}]  {'best chunks/s':>14} {'median chunks/s':>16}")
    for name in CONSUMERS:
        print(f"{name:<8} {best[name]:>14,.0f} {median[name]:>16,.0f}")
    for label, table in (("best", best), ("median", median)):
        print(
            f"{label:<6}   ours/sdk = {table['ours'] / table['sdk']:5.2f}x (target >= 5)   "
            f"ours/floor = {table['ours'] / table['floor']:4.2f}x (target >= 0.5)"
        )


async def main(args: argparse.Namespace) -> None:
    body, expected = build_stream(args.chunks)
    pieces = split_events(body) if args.split == "event" else split_every(body, int(args.split))
    n = expected["chunks"]
    print(
        f"stream: {n} chunk events + [DONE], {len(body) / 1e6:.2f} MB, {len(pieces)} pieces "
        f"(split: {args.split}); {args.repeat} rounds; python {sys.version.split()[0]}"
    )
    for transport in args.transport.split(","):
        report(transport, await measure(transport, pieces, expected, args.repeat), n)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=24_000, help="chunk events to generate (>= 20000)")
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds per transport")
    parser.add_argument("--split", default="event", help="'event' (one piece per SSE event) or a byte count")
    parser.add_argument("--transport", default="http,memory", help="comma-separated: http, memory")
    asyncio.run(main(parser.parse_args()))
