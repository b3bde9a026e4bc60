"""One measured run of each scenario: load (PicoBot or the Channels floor), idle, churn, slow reader.

A *target* is a started server (``servers.EmbeddedPicoBot``, ``ScaleoutPicoBot`` or
``ChannelsFloor``): it has ``ws_urls``, ``pids`` and, for PicoBot, ``tokens``. Chunk write times
come from the LLM server (PicoBot) or from the floor itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.load.clients import DialogClient, RawSocket, close_all, connect_cycle, open_all
from bench.load.common import cpu_seconds, dumps, full_text, memory_kib, summary_ms, tag

TimesSource = Callable[[], Awaitable[dict]]


def rss_mib(pids: list[int]) -> float:
    return sum(memory_kib(pid)["VmRSS"] for pid in pids) / 1024


def hwm_mib(pids: list[int]) -> float:
    return sum(memory_kib(pid)["VmHWM"] for pid in pids) / 1024


class Sampler:
    """Samples the summed RSS of ``pids`` every ``interval`` s (bounded by the run)."""

    def __init__(self, pids: list[int], interval: float = 1.0) -> None:
        self.pids = pids
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self.t0 = time.time()
        self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while True:
            self.samples.append((round(time.time() - self.t0, 1), round(rss_mib(self.pids), 1)))
            await asyncio.sleep(self.interval)

    async def stop(self) -> list[tuple[float, float]]:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        return self.samples


def analyse(results: list, times: dict[str, list[float]], chunks: int) -> dict[str, Any]:
    """Latency, TTFT, frames and lost turns from the clients' results and the chunk write times."""
    expected = full_text(chunks)
    latencies: list[float] = []
    ttft: list[float] = []
    llm_start: list[float] = []
    frames: list[int] = []
    lost = {
        "not_connected": 0,
        "no_terminal": 0,
        "no_committed": 0,
        "text_mismatch": 0,
        "failed": 0,
        "interrupted": 0,
        "cancelled": 0,
        "short_stream": 0,
        "no_llm_request": 0,
    }
    errors: dict[str, int] = {}
    ok = 0
    for r in results:
        if not r.connected:
            lost["not_connected"] += 1
            errors[r.connect_error] = errors.get(r.connect_error, 0) + 1
            continue
        for text in r.errors + ([r.closed_early] if r.closed_early else []):
            errors[text] = errors.get(text, 0) + 1
        stamps = times.get(r.key)
        if stamps is None:
            lost["no_llm_request"] += 1
        else:
            if stamps and r.sent_at:
                llm_start.append(stamps[0] - r.sent_at)
            for k, seen in enumerate(r.chunk_seen_at[: len(stamps)]):
                latencies.append(seen - stamps[k])
        if r.first_text_at:
            ttft.append(r.first_text_at - r.sent_at)
        frames.append(r.frames)
        bad = False
        if not r.terminal_status:
            lost["no_terminal"] += 1
            bad = True
        if not r.committed:
            lost["no_committed"] += 1
            bad = True
        elif r.committed_text != expected:
            lost["text_mismatch"] += 1
            bad = True
        if r.terminal_status == "failed":
            lost["failed"] += 1
            bad = True
        if r.terminal_status == "cancelled":
            lost["cancelled"] += 1
            bad = True
        if "interrupt" in r.terminal_error.lower():
            lost["interrupted"] += 1
            bad = True
        if r.terminal_status == "completed" and len(r.chunk_seen_at) < chunks:
            lost["short_stream"] += 1
            bad = True
        if r.terminal_error and r.terminal_status != "completed":
            errors["turn error: " + r.terminal_error[:150]] = (
                errors.get("turn error: " + r.terminal_error[:150], 0) + 1
            )
        ok += not bad
    return {
        "turns": len(results),
        "ok": ok,
        "lost": lost,
        "lost_total": len(results) - ok,
        "latency_ms": summary_ms(latencies),
        "ttft_ms": summary_ms(ttft),
        # message sent -> the LLM server wrote chunk 0: PicoBot's turn start (inbox, lease, history, input)
        "send_to_llm_ms": summary_ms(llm_start),
        "frames_per_turn": statistics.mean(frames) if frames else float("nan"),
        "frames_per_turn_min": min(frames) if frames else 0,
        "client_errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:8]),
    }


async def run_load(
    target: Any,
    tokens: list[str],
    times_source: TimesSource,
    *,
    dialogs: int,
    chunks: int,
    spread: float,
    timeout: float,
    run_id: str,
    llm_pids: list[int],
    slow_token: str | None = None,
    slow_port: int = 0,
    slow_hold: float = 10.0,
    lock_after: float | None = None,
    lock_seconds: float = 30.0,
) -> dict[str, Any]:
    """N dialog clients (and optionally one non-reading socket) against ``target``; with
    ``lock_after``, the target's storage is locked for ``lock_seconds`` that long after the first
    send (``target.hold_storage_lock``), in the middle of the turns."""
    urls = target.ws_urls
    clients = [
        DialogClient(i, urls[i % len(urls)], tokens[i], f"{run_id}-{i}", chunks) for i in range(dialogs)
    ]
    connected = await open_all(clients, timeout=min(timeout, 120))
    await asyncio.sleep(0.5)
    pids = target.pids
    me = os.getpid()
    slow_info: dict[str, Any] | None = None
    raw: RawSocket | None = None
    sampler = Sampler(pids)
    if slow_token is not None:
        raw, slow_info = await start_slow_reader(slow_port, slow_token, run_id)
    cpu0 = {pid: cpu_seconds(pid) for pid in [*pids, *llm_pids, me]}
    start = time.time() + 0.5
    t_begin = time.time()
    lock: dict[str, float] = {}

    async def hold_lock() -> None:
        await asyncio.sleep(max(0.0, start + lock_after - time.time()))
        lock["held_from_s"] = time.time() - start
        await asyncio.to_thread(target.hold_storage_lock, lock_seconds)
        lock["released_at_s"] = time.time() - start

    locker = asyncio.ensure_future(hold_lock()) if lock_after is not None else None
    results = await asyncio.gather(
        *(c.run(start + spread * i / dialogs, timeout) for i, c in enumerate(clients))
    )
    if locker is not None:
        await locker
    wall = time.time() - t_begin
    cpu = {pid: cpu_seconds(pid) - cpu0[pid] for pid in cpu0}
    times = (await times_source()).get("times", {})
    server_cpu = sum(cpu[pid] for pid in pids)
    # chunks the LLM server (or the floor) really wrote for these dialogs: lost turns stream none
    total_chunks = sum(len(times.get(c.result.key) or ()) for c in clients)
    out = analyse(list(results), times, chunks)
    if lock:
        committed = [r.committed_at - start for r in results if r.committed_at]
        lock["committed_before_release"] = sum(t < lock["released_at_s"] for t in committed)
        lock["committed_after_release"] = sum(t >= lock["released_at_s"] for t in committed)
        lock["last_committed_s"] = max(committed, default=float("nan"))
        out["storage_lock"] = lock
    out.update(
        {
            "connected": connected,
            "chunks_streamed": total_chunks,
            "wall_s": wall,
            "server_cpu_s": server_cpu,
            "cpu_per_1000_chunks": server_cpu / total_chunks * 1000 if total_chunks else float("nan"),
            "llm_cpu_s": sum(cpu[pid] for pid in llm_pids),
            "harness_cpu_s": cpu[me],
            "peak_rss_mib": hwm_mib(pids),
            "rss_end_mib": rss_mib(pids),
        }
    )
    if raw is not None and slow_info is not None:
        await asyncio.sleep(slow_hold)
        slow_info["rss_before_close_mib"] = rss_mib(pids)
        raw.abort()
        await asyncio.sleep(5)
        slow_info["rss_5s_after_close_mib"] = rss_mib(pids)
        out["slow_reader"] = slow_info
    samples = await sampler.stop()
    out["rss_samples"] = samples
    if slow_info is not None:
        slow_info["rss_peak_sampled_mib"] = max(s[1] for s in samples)
    await close_all(clients)
    return out


async def start_slow_reader(port: int, token: str, run_id: str) -> tuple[RawSocket, dict[str, Any]]:
    """Open the non-reading socket: ready, one long message (read up to its ack for the dialog id),
    three more long messages and 300 ``history`` requests, then never read again."""
    raw = RawSocket()
    info: dict[str, Any] = {"history_requests": 300, "long_messages": 4}
    await raw.open(port, token)
    async with asyncio.timeout(30):
        while (await raw.read_frame()).get("type") != "ready":
            pass
    body = "x" * 30_000
    await raw.send_text(
        dumps(
            {
                "type": "message",
                "content": f"{tag(run_id + '-slow-0')} {body}",
                "client_msg_id": f"{run_id}-slow-0",
            }
        )
    )
    session_id = None
    async with asyncio.timeout(30):
        while session_id is None:
            frame = await raw.read_frame()
            if frame.get("type") == "ack":
                session_id = frame["session_id"]
    for i in range(1, 4):
        await raw.send_text(
            dumps(
                {
                    "type": "message",
                    "content": f"{tag(f'{run_id}-slow-{i}')} {body}",
                    "client_msg_id": f"{run_id}-slow-{i}",
                }
            )
        )
    for _ in range(300):
        await raw.send_text(dumps({"type": "history", "session_id": session_id, "limit": 200}))
    info["session_id"] = session_id
    return raw, info


async def run_idle(target: Any, tokens: list[str], *, connections: int, timeout: float) -> dict[str, Any]:
    """Open ``connections`` idle authenticated sockets; server RSS growth per connection."""
    pids = target.pids
    await connect_cycle(target.ws_urls[0], tokens[0], timeout)  # warm the code paths
    await asyncio.sleep(2)
    before = rss_mib(pids)
    urls = target.ws_urls
    clients = [
        DialogClient(i, urls[i % len(urls)], tokens[i % len(tokens)], f"idle-{i}", 0)
        for i in range(connections)
    ]
    t0 = time.time()
    opened = await open_all(clients, timeout=timeout, concurrency=64)
    open_s = time.time() - t0
    await asyncio.sleep(3)
    after = rss_mib(pids)
    errors: dict[str, int] = {}
    for c in clients:
        if c.result.connect_error:
            errors[c.result.connect_error] = errors.get(c.result.connect_error, 0) + 1
    await close_all(clients)
    await asyncio.sleep(3)
    closed = rss_mib(pids)
    return {
        "connections": connections,
        "opened": opened,
        "open_s": open_s,
        "rss_before_mib": before,
        "rss_open_mib": after,
        "rss_after_close_mib": closed,
        "kib_per_connection": (after - before) * 1024 / opened if opened else float("nan"),
        "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5]),
    }


async def run_churn(
    target: Any, tokens: list[str], *, cycles: int, concurrency: int, timeout: float, time_limit: float
) -> dict[str, Any]:
    """Connect, wait ``ready``, close — ``cycles`` times, ``concurrency`` at a time.

    RSS and Redis clients cold, after a warm-up at the same concurrency (a tenth of ``cycles``,
    200 to 1 000: first-use allocations, caches, the Redis pool grown to the concurrency), after
    each quarter of the measured cycles (a leak grows with the cycles, a cache levels off) and
    5 s after the last one.
    """
    pids = target.pids
    urls = target.ws_urls
    baseline_rss = rss_mib(pids)
    baseline_redis = await target.redis_clients()
    warm = min(cycles, max(200, min(1000, cycles // 10)))
    errors: dict[str, int] = {}
    done = 0
    deadline = time.monotonic() + time_limit

    async def run(first: int, count: int, measured: bool) -> None:
        counter = iter(range(first, first + count))

        async def loop() -> None:
            nonlocal done
            for i in counter:
                if time.monotonic() > deadline:
                    return
                error = await connect_cycle(urls[i % len(urls)], tokens[i % len(tokens)], timeout)
                if error and measured:
                    errors[error] = errors.get(error, 0) + 1
                done += measured

        await asyncio.gather(*(loop() for _ in range(concurrency)))

    await run(0, warm, measured=False)
    await asyncio.sleep(2)
    warm_rss = rss_mib(pids)
    warm_redis = await target.redis_clients()
    quarters: list[dict[str, Any]] = []
    t0 = time.time()
    for q in range(4):
        count = cycles // 4 + (1 if q < cycles % 4 else 0)
        await run(warm + done, count, measured=True)
        await asyncio.sleep(1)
        quarters.append(
            {"cycles": done, "rss_mib": rss_mib(pids), "redis_clients": await target.redis_clients()}
        )
    wall = time.time() - t0 - 4
    await asyncio.sleep(5)
    return {
        "cycles": done,
        "warmup_cycles": warm,
        "wall_s": wall,
        "cycles_per_s": done / wall if wall > 0 else float("nan"),
        "failed": sum(errors.values()),
        "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5]),
        "rss_baseline_mib": baseline_rss,
        "rss_after_warmup_mib": warm_rss,
        "rss_quarters_mib": [q["rss_mib"] for q in quarters],
        "redis_quarters": [q["redis_clients"] for q in quarters],
        "rss_after_mib": rss_mib(pids),
        "redis_clients_baseline": baseline_redis,
        "redis_clients_after_warmup": warm_redis,
        "redis_clients_after": await target.redis_clients(),
    }
