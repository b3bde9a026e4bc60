"""The layer floor: Channels' ``InMemoryChannelLayer`` alone, in this process.

    python -m bench.load.layer_floor --dialogs 100 --chunks 200 --rate 20 --spread 2

N producer tasks, each doing one ``group_send`` per chunk at the rate to its own group (a
message shaped like PicoBot's ``turn.snapshot``, its ``json`` a turn whose text grows per chunk,
serialised once), and N receiver tasks, one channel in each group. Prints one JSON line: the
send→receive latency (p50/p99/max ms), messages sent/received, CPU seconds of the process over
the run and its peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

from bench.load.common import chunk_text, cpu_seconds, memory_kib, summary_ms


async def run(dialogs: int, chunks: int, rate: float, spread: float, capacity: int) -> dict:
    from channels.layers import InMemoryChannelLayer

    layer = InMemoryChannelLayer(capacity=capacity, expiry=60)
    interval = 1.0 / rate
    latencies: list[float] = []
    received = [0] * dialogs
    sent = [0] * dialogs
    channels = []
    for i in range(dialogs):
        channel = await layer.new_channel()
        await layer.group_add(f"g{i}", channel)
        channels.append(channel)

    async def producer(i: int, start: float) -> None:
        loop = asyncio.get_running_loop()
        delay = start - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        base = loop.time()
        parts: list[str] = []
        turn = {
            "id": f"t{i}",
            "session_id": "floor",
            "message_id": f"m{i}",
            "revision": 0,
            "status": "running",
            "phase": "responding",
            "blocks": [],
            "usage": None,
            "error": None,
        }
        for k in range(chunks + 1):
            wait = base + k * interval - loop.time()
            if wait > 0 and k < chunks:
                await asyncio.sleep(wait)
            if k < chunks:
                parts.append(chunk_text(k))
            turn["revision"] = k + 1
            turn["status"] = "running" if k < chunks else "completed"
            turn["blocks"] = [{"type": "assistant", "id": "a0", "iteration": 0, "text": "".join(parts)}]
            payload = json.dumps(turn, ensure_ascii=False, separators=(",", ":"))
            await layer.group_send(
                f"g{i}",
                {
                    "type": "turn.snapshot",
                    "turn_id": turn["id"],
                    "revision": k + 1,
                    "terminal": k == chunks,
                    "json": payload,
                    "t": time.time(),
                },
            )
            sent[i] += 1

    async def receiver(i: int, deadline: float) -> None:
        channel = channels[i]
        while True:
            remaining = deadline - time.time()
            if remaining <= 0:
                return
            try:
                message = await asyncio.wait_for(layer.receive(channel), remaining)
            except TimeoutError:
                return
            latencies.append(time.time() - message["t"])
            received[i] += 1
            if message["terminal"]:
                return

    start = time.time() + 0.2
    deadline = start + spread + chunks / rate + 60
    cpu0 = cpu_seconds(os.getpid())
    await asyncio.gather(
        *(producer(i, start + spread * i / dialogs) for i in range(dialogs)),
        *(receiver(i, deadline) for i in range(dialogs)),
    )
    cpu = cpu_seconds(os.getpid()) - cpu0
    total_chunks = dialogs * chunks
    return {
        "latency_ms": summary_ms(latencies),
        "sent": sum(sent),
        "received": sum(received),
        "lost": sum(sent) - sum(received),
        "cpu_s": cpu,
        "cpu_per_1000_chunks": cpu / total_chunks * 1000 if total_chunks else 0.0,
        "peak_rss_mib": memory_kib(os.getpid())["VmHWM"] / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dialogs", type=int, default=100)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--spread", type=float, default=2.0)
    parser.add_argument("--capacity", type=int, default=1000)
    args = parser.parse_args()
    result = asyncio.run(run(args.dialogs, args.chunks, args.rate, args.spread, args.capacity))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
