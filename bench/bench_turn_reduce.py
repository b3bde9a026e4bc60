"""Turn reduction and publishing cost: does the cost per delta stay flat as a turn grows?

Run by hand from the repo root::

    .venv/bin/python bench/bench_turn_reduce.py                # 10 000 and 100 000 deltas, 5 rounds
    .venv/bin/python bench/bench_turn_reduce.py --repeat 3 --watchers 100

Part 1. One event script per size: ``N`` answer-text deltas of
realistic token size (2–7 characters, some non-ASCII), interleaved every 1 000 text deltas with
a 40-delta reasoning burst, a text-segment boundary and two parallel tool calls (started,
finished with a preview), then a new iteration — so a 100 000-delta turn has 400 blocks. The
script drives the **real** ``TurnController`` and a **real** ``DeliveryCoordinator`` with the
WebSocket throttle (``Snapshot(1/30)``: at most 30 published snapshots per second, real clock)
into a fake sink that only counts. The producer yields to the event loop every 8 events, as a
provider stream does per network read, so the coordinator publishes while the turn runs. Timed:
from the first event to the delivered terminal snapshot; reported per text delta.

Why the real clock and a producer running flat out, rather than a simulated token rate: the
claim under test is that *per-delta* work is O(1) amortised — a delta appends to a list and
bumps a revision; text is joined and JSON built only when a snapshot is published, at most 30
times a second whatever the token rate. Publishing itself is O(snapshot size) (every published
snapshot is complete, by design), so its cost is bounded per second, not per delta; part 1 also
reports the serialised bytes per published snapshot and the cost of serialising the largest one,
which is what 30 publishes a second cost at the end of a very long turn.

Part 2: 100 watchers of one chat. ``--watchers`` channels join the chat's group on PicoBot's
``LocalChannelLayer`` (the embedded mode's layer); a turn runs through the real coordinator and the real ``CliChatSink``;
every watcher receives every published snapshot and runs the consumer's path (the ``seen``
credit window and ``turn_updated_frame``). This turn is paced to last about ``--watch-seconds``
so that the throttle publishes a realistic number of snapshots (it is not timed). Counted: ``serialize_snapshot`` calls and every
``json.dumps`` call in the process while it runs, apart from those made while an event is
applied (a tool start measures its arguments once). Target: one serialisation per published
snapshot, whatever the number of watchers.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import delivery.coordinator as coordinator_module  # noqa: E402
from delivery.coordinator import DeliveryCoordinator  # noqa: E402
from delivery.events import (  # noqa: E402
    ReasoningDelta,
    TextDelta,
    TextSegmentFinished,
    ToolFinished,
    ToolStarted,
    TurnEvent,
)
from delivery.flow import SnapshotCreditWindow  # noqa: E402
from delivery.groups import chat_group  # noqa: E402
from delivery.local_layer import LocalChannelLayer  # noqa: E402
from delivery.platforms.cli_chat import CliChatSink, turn_updated_frame  # noqa: E402
from delivery.presentation import PresentationPolicy, serialize_snapshot  # noqa: E402
from delivery.sinks import Snapshot  # noqa: E402
from delivery.turn import TurnController  # noqa: E402

WORDS = [
    " the",
    " gate",
    "way",
    " turn",
    " snap",
    "shot",
    " 界面",
    " über",
    " data",
    ",",
    " and",
    " flow",
    ".",
]
TEXT_PER_CYCLE = 1000
REASONING_PER_CYCLE = 40
YIELD_EVERY = 8
PUBLISH_INTERVAL = 1 / 30


def make_script(text_deltas: int) -> tuple[list[TurnEvent], str]:
    """Events of one long turn and the answer text they add up to."""
    events: list[TurnEvent] = []
    answer: list[str] = []
    iteration = 0
    emitted = 0
    while emitted < text_deltas:
        events += [ReasoningDelta(iteration, f" think{i}") for i in range(REASONING_PER_CYCLE)]
        for _ in range(min(TEXT_PER_CYCLE, text_deltas - emitted)):
            word = WORDS[emitted % len(WORDS)]
            events.append(TextDelta(iteration, word))
            answer.append(word)
            emitted += 1
        events.append(TextSegmentFinished(iteration))
        calls = [f"call_{iteration}_{k}" for k in range(2)]
        events += [ToolStarted(iteration, c, "search", {"query": f"q{iteration}", "limit": 5}) for c in calls]
        events += [ToolFinished(iteration, c, True, f"result of {c}: " + "x" * 120) for c in calls]
        iteration += 1
    return events, "".join(answer)


class CountingSink:
    """A sink that accepts everything and remembers payload sizes (UTF-8 bytes)."""

    def __init__(self) -> None:
        self.live_policy = Snapshot(PUBLISH_INTERVAL)
        self.sizes: list[int] = []
        self.last_payload = ""

    async def update(self, snapshot, payload_json: str) -> None:
        self.sizes.append(len(payload_json.encode()))

    async def finish(self, snapshot, payload_json: str) -> None:
        self.sizes.append(len(payload_json.encode()))
        self.last_payload = payload_json

    async def close(self) -> None:
        return None


async def run_turn(
    events: list[TurnEvent], *, coordinated: bool
) -> tuple[float, CountingSink, TurnController]:
    """Seconds from the first event to the delivered terminal snapshot (or the last event)."""
    controller = TurnController("t", "cli_chat:1:d", "m")
    sink = CountingSink()
    handle = (
        DeliveryCoordinator(controller, sink, PresentationPolicy.websocket()).start() if coordinated else None
    )
    apply = controller.apply
    gc.collect()
    started = time.perf_counter()
    for index, event in enumerate(events):
        apply(event)
        if index % YIELD_EVERY == 0:
            await asyncio.sleep(0)
    controller.complete({"input_tokens": 1, "output_tokens": len(events)})
    if handle is not None:
        result = await handle.wait(timeout=60)
        assert result.ok, result.error
    elapsed = time.perf_counter() - started
    return elapsed, sink, controller


def serialise_cost_us(controller: TurnController, rounds: int = 20) -> float:
    snapshot = controller.snapshot()
    policy = PresentationPolicy.websocket()
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        serialize_snapshot(snapshot, policy)
        best = min(best, time.perf_counter() - started)
    return best * 1e6


async def part_one(sizes: list[int], repeat: int) -> None:
    print(
        f"Part 1: reduce N text deltas (+ reasoning and tool blocks) and publish at <= 30/s; {repeat} rounds"
    )
    print()
    header = (
        f"| {'text deltas':>11} | {'events':>7} | {'blocks':>6} | {'reduce only µs/delta':>20} "
        f"| {'reduce+publish µs/delta (best / median)':>39} | {'published':>9} "
        f"| {'bytes/snapshot (mean / last)':>28} | {'serialise last µs':>17} |"
    )
    print(header)
    print("|" + "|".join("-" * len(cell) for cell in header.split("|")[1:-1]) + "|")
    medians: dict[int, float] = {}
    last_serialise_us = 0.0
    for n in sizes:
        events, answer = make_script(n)
        _, sink, controller = await run_turn(events, coordinated=True)  # warm-up and correctness check
        final = json.loads(sink.last_payload)
        text = "".join(b["text"] for b in final["blocks"] if b["type"] == "assistant")
        assert text == answer and final["status"] == "completed", "the bench must not be fast by being wrong"
        reduce_only = min([(await run_turn(events, coordinated=False))[0] for _ in range(repeat)])
        timings, published, mean_bytes = [], [], []
        for _ in range(repeat):
            elapsed, sink, controller = await run_turn(events, coordinated=True)
            timings.append(elapsed)
            published.append(len(sink.sizes))
            mean_bytes.append(statistics.fmean(sink.sizes))
        medians[n] = statistics.median(timings) / n * 1e6
        last_serialise_us = serialise_cost_us(controller)
        print(
            f"| {n:>11,} | {len(events):>7,} | {len(final['blocks']):>6} | {reduce_only / n * 1e6:>20.2f} "
            f"| {min(timings) / n * 1e6:>18.2f} / {medians[n]:<18.2f} | {statistics.median(published):>9.0f} "
            f"| {statistics.fmean(mean_bytes):>13,.0f} / {sink.sizes[-1]:<12,} "
            f"| {last_serialise_us:>17,.0f} |"
        )
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        ratio = medians[large] / medians[small]
        verdict = "OK" if ratio <= 1.3 else "FAIL"
        print()
        print(
            f"µs per delta, {large:,} vs {small:,} deltas (medians): ratio {ratio:.2f} (target <= 1.3: {verdict})"
        )
        print(
            f"Publishing the largest snapshot 30 times a second costs {30 * last_serialise_us / 1e4:.1f} % of a core "
            "(bounded per second, whatever the token rate)."
        )


async def part_two(watchers: int, text_deltas: int, seconds: float) -> None:
    print()
    print(
        f"Part 2: one chat, {watchers} watchers on the in-memory layer, a turn of {text_deltas:,} text deltas"
    )
    layer = LocalChannelLayer(capacity=10_000)
    group = chat_group("cli_chat", "1")
    channels = [await layer.new_channel() for _ in range(watchers)]
    for channel in channels:
        await layer.group_add(group, channel)
    windows = [SnapshotCreditWindow() for _ in channels]
    frames = [0] * watchers

    # json.dumps calls made while applying an event (a tool start measures its arguments once)
    # are per-event work, counted apart from the publish path's.
    counts = {"serialize_snapshot": 0, "json.dumps": 0, "json.dumps in apply": 0}
    applying = False
    real_serialize, real_dumps = coordinator_module.serialize_snapshot, json.dumps

    def counting_serialize(*args, **kwargs):
        counts["serialize_snapshot"] += 1
        return real_serialize(*args, **kwargs)

    def counting_dumps(*args, **kwargs):
        counts["json.dumps in apply" if applying else "json.dumps"] += 1
        return real_dumps(*args, **kwargs)

    coordinator_module.serialize_snapshot = counting_serialize
    json.dumps = counting_dumps
    try:
        controller = TurnController("t", "cli_chat:1:d", "m")
        sink = CliChatSink(layer, group, min_interval=PUBLISH_INTERVAL)
        handle = DeliveryCoordinator(controller, sink, PresentationPolicy.websocket()).start()
        events, _ = make_script(text_deltas)
        published = 0
        payload_objects: dict[int, set[int]] = {}  # revision -> ids of the payload strings received
        kept: list[str] = []  # keeps the strings alive so their ids stay unique

        async def drain() -> None:
            nonlocal published
            for index, channel in enumerate(channels):
                queue = layer.channels.get(channel)
                while queue is not None and not queue.empty():
                    message = await layer.receive(channel)
                    queue = layer.channels.get(channel)
                    if index == 0:
                        published += 1
                    kept.append(message["json"])
                    payload_objects.setdefault(message["revision"], set()).add(id(message["json"]))
                    # The ChatConsumer's turn_snapshot path, then the seen that a reading client sends.
                    for payload in windows[index].offer(
                        message["turn_id"], message["revision"], message["terminal"], message["json"]
                    ):
                        turn_updated_frame(payload)
                        frames[index] += 1
                    windows[index].seen(message["turn_id"], message["revision"])

        pause = seconds / (len(events) / YIELD_EVERY)
        started = time.perf_counter()
        for index, event in enumerate(events):
            applying = True
            controller.apply(event)
            applying = False
            if index % YIELD_EVERY == 0:
                await asyncio.sleep(pause)
                await drain()
        controller.complete(None)
        assert (await handle.wait(timeout=60)).ok
        await drain()
        elapsed = time.perf_counter() - started
    finally:
        coordinator_module.serialize_snapshot = real_serialize
        json.dumps = real_dumps
    print(
        f"  published snapshots (layer messages per watcher): {published} in {elapsed:.1f} s "
        f"({published / elapsed:.0f}/s)"
    )
    print(f"  frames sent, all watchers together: {sum(frames):,} ({min(frames)}–{max(frames)} per watcher)")
    print(
        f"  serialize_snapshot calls: {counts['serialize_snapshot']}; json.dumps calls on the publish path: "
        f"{counts['json.dumps']} (and {counts['json.dumps in apply']} while applying events: tool starts)"
    )
    shared = all(len(ids) == 1 for ids in payload_objects.values())
    print(f"  every watcher got the same str object per snapshot (no copy, no re-encoding): {shared}")
    per_snapshot = counts["json.dumps"] / max(published, 1)
    verdict = "OK" if counts["serialize_snapshot"] == published and per_snapshot == 1 else "FAIL"
    print(
        f"  serialisations per published snapshot: {per_snapshot:.2f} (target 1, for {watchers} watchers: {verdict})"
    )


def part_paced(sizes: list[int], rates: list[int]) -> None:
    """Part 3: a real token rate, on a simulated clock, with the coordinator's publishing rule.

    Tokens arrive at ``rate`` per second of *simulated* time; a snapshot is published when the
    throttle allows: at most 30 per second, and after an N-byte snapshot not before N /
    ``DEFAULT_MAX_BYTES_PER_SECOND`` seconds (the coordinator's byte budget). Timed: the real CPU
    spent reducing and serialising, per text delta. Without the byte budget the cost per delta
    would grow with the turn (every snapshot is complete); with it, it must stay flat.
    """
    policy = PresentationPolicy.websocket()
    budget = coordinator_module.DEFAULT_MAX_BYTES_PER_SECOND
    print(f"\n[part 3] paced tokens, 30/s throttle + {budget:,} bytes/s budget (simulated clock)")
    for rate in rates:
        per_delta: dict[int, float] = {}
        for n in sizes:
            events, _ = make_script(n)
            controller = TurnController("bench-turn", "cli_chat:1:bench", "bench-msg")
            sim_now, next_at, deltas, published = 0.0, 0.0, 0, 0
            gc.collect()
            started = time.perf_counter()
            for event in events:
                controller.apply(event)
                if isinstance(event, TextDelta):
                    deltas += 1
                    sim_now = deltas / rate
                    if sim_now >= next_at:
                        payload = serialize_snapshot(controller.snapshot(), policy)
                        published += 1
                        next_at = sim_now + max(PUBLISH_INTERVAL, len(payload) / budget)
            per_delta[n] = (time.perf_counter() - started) / n * 1e6
            print(
                f"  {rate:>4} tokens/s, {n:>7,} deltas: {per_delta[n]:7.2f} µs/delta ({published} snapshots)"
            )
        low, high = min(sizes), max(sizes)
        ratio = per_delta[high] / per_delta[low]
        print(
            f"  {rate:>4} tokens/s: ratio {high:,}/{low:,} = {ratio:.2f} (target <= 1.3: {'OK' if ratio <= 1.3 else 'FAIL'})"
        )


async def main(args: argparse.Namespace) -> None:
    await part_one(args.sizes, args.repeat)
    part_paced(args.sizes, args.rates)
    await part_two(args.watchers, args.watch_deltas, args.watch_seconds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[10_000, 100_000], help="text deltas per turn"
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds per size")
    parser.add_argument("--rates", type=int, nargs="+", default=[60, 300], help="tokens/s in part 3")
    parser.add_argument("--watchers", type=int, default=100, help="group members in part 2")
    parser.add_argument("--watch-deltas", type=int, default=20_000, help="text deltas of the part 2 turn")
    parser.add_argument("--watch-seconds", type=float, default=3.0, help="how long the part 2 turn streams")
    asyncio.run(main(parser.parse_args()))
