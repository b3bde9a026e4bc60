from __future__ import annotations

import asyncio
import json
import warnings

import pytest

from delivery import presentation
from delivery.coordinator import DeliveryCoordinator, open_delivery
from delivery.events import ReasoningDelta, TextDelta
from delivery.handle import DeliveryStartError
from delivery.presentation import PresentationPolicy, PresentedSnapshot
from delivery.sinks import FinalOnly, SinkError, SinkNotModified, Snapshot
from delivery.testing import RecordingSink
from delivery.turn import TurnController

FAST = {"retry_delays": (0.0,), "finish_timeout": 1.0}


def turn() -> TurnController:
    return TurnController("t1", "cli_chat:u:d", "m1")


async def until(condition, seconds: float = 2.0) -> None:
    """Polls a fake's recorded state; the bound only stops a broken test from hanging."""
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 - the fakes expose plain lists, not events
            await asyncio.sleep(0.001)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


class CountingPolicy:
    """Duck-typed policy that counts how often a snapshot is filtered."""

    def __init__(self, inner: PresentationPolicy | None = None) -> None:
        self.inner = inner or PresentationPolicy.websocket()
        self.live = self.inner.live
        self.revisions: list[int] = []

    def present(self, snapshot):
        self.revisions.append(snapshot.revision)
        return self.inner.present(snapshot)


async def test_a_final_only_sink_gets_just_the_terminal_snapshot():
    c = turn()
    sink = RecordingSink(FinalOnly())
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket()).start()
    for part in "hello":
        c.apply(TextDelta(0, part))
    await settle()
    c.complete()
    result = await handle.wait(timeout=2)
    assert result.ok and result.error is None and result.attempts == 1
    assert result.last_delivered_revision == c.revision
    assert sink.updates == []
    assert [s.revision for s, _ in sink.finishes] == [c.revision]
    assert json.loads(sink.finishes[0][1])["blocks"][0]["text"] == "hello"
    assert sink.close_calls == 1


async def test_a_policy_that_is_not_live_suppresses_running_updates():
    c = turn()
    sink = RecordingSink(Snapshot(0.0))
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.final_only()).start()
    c.apply(TextDelta(0, "a"))
    await settle()
    c.complete()
    assert (await handle.wait(timeout=2)).ok
    assert sink.updates == [] and len(sink.finishes) == 1


async def test_running_snapshots_are_throttled_and_the_terminal_one_bypasses_the_throttle():
    c = turn()
    sink = RecordingSink(Snapshot(min_interval=30.0))
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket()).start()
    await until(lambda: sink.updates)
    for _ in range(50):
        c.apply(TextDelta(0, "x"))
        await asyncio.sleep(0)
    await settle()
    assert sink.update_revisions == [0], "within the interval nothing else goes out"
    c.complete()
    result = await handle.wait(timeout=5)  # far below the 30 s interval
    assert result.ok
    assert [s.revision for s, _ in sink.finishes] == [51]


async def test_after_the_interval_the_newest_snapshot_goes_out():
    c = turn()
    sink = RecordingSink(Snapshot(min_interval=0.02))
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket()).start()
    await until(lambda: sink.updates)
    for _ in range(10):
        c.apply(TextDelta(0, "x"))
    await until(lambda: len(sink.updates) == 2)
    assert sink.update_revisions == [0, 10]
    c.complete()
    assert (await handle.wait(timeout=2)).ok


async def test_big_snapshots_are_published_less_often_to_bound_bytes_per_second():
    c = turn()
    sink = RecordingSink(Snapshot(min_interval=0.0))
    coordinator = DeliveryCoordinator(c, sink, PresentationPolicy.websocket(), max_bytes_per_second=10_000)
    handle = coordinator.start()
    await until(lambda: sink.updates)
    c.apply(TextDelta(0, "x" * 20_000))  # one snapshot of ~20 KB: the next may follow after ~2 s
    await until(lambda: len(sink.updates) == 2)
    for _ in range(20):
        c.apply(TextDelta(0, "y"))
        await asyncio.sleep(0.01)
    await settle()
    assert len(sink.updates) == 2, "the 20 KB snapshot holds the next one back for ~2 s"
    c.complete()
    assert (await handle.wait(timeout=1)).ok, "the terminal snapshot is never held back"
    assert sink.finishes[-1][0].revision == c.revision


async def test_a_slow_sink_skips_intermediate_snapshots():
    c = turn()
    sink = RecordingSink(Snapshot(0.0))
    sink.update_gate = asyncio.Event()
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket()).start()
    await until(lambda: sink.updates)
    for _ in range(100):
        c.apply(TextDelta(0, "x"))
    sink.update_gate.set()
    await until(lambda: len(sink.updates) == 2)
    await settle()
    assert sink.update_revisions == [0, 100]
    c.complete()
    assert (await handle.wait(timeout=2)).ok


async def test_a_failed_running_update_is_not_retried_and_the_next_snapshot_recovers():
    c = turn()
    sink = RecordingSink(Snapshot(0.0), update_errors=[RuntimeError("edit failed")])
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket()).start()
    await until(lambda: sink.updates)
    await settle()
    assert sink.update_revisions == [0], "the failed stale snapshot is not sent again"
    c.apply(TextDelta(0, "a"))
    await until(lambda: len(sink.updates) == 2)
    assert sink.update_revisions == [0, 1]
    c.complete()
    result = await handle.wait(timeout=2)
    assert result.ok and len(sink.delivered) == 2


async def test_a_hung_update_is_abandoned_and_the_terminal_snapshot_still_arrives():
    c = turn()
    sink = RecordingSink(Snapshot(0.0))
    sink.update_gate = asyncio.Event()  # never set: the client is stuck
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket(), update_timeout=0.02).start()
    await until(lambda: sink.updates)
    c.complete()
    result = await handle.wait(timeout=2)
    assert result.ok and result.last_delivered_revision == 1


async def test_the_terminal_snapshot_is_retried_until_it_succeeds():
    c = turn()
    sink = RecordingSink(FinalOnly(), finish_errors=[ConnectionError("down"), TimeoutError()])
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket(), **FAST).start()
    c.apply(TextDelta(0, "a"))
    c.complete()
    result = await handle.wait(timeout=2)
    assert result.ok and result.attempts == 3
    payloads = [payload for _, payload in sink.finishes]
    assert payloads[0] is payloads[1] is payloads[2], "one serialisation, retried as is"


async def test_terminal_retries_are_bounded_and_reported():
    c = turn()
    sink = RecordingSink(FinalOnly(), finish_errors=[ConnectionError("down")] * 10)
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket(), finish_attempts=3, **FAST).start()
    c.complete()
    result = await handle.wait(timeout=2)
    assert not result.ok
    assert result.attempts == 3 and len(sink.finishes) == 3
    assert result.error == "ConnectionError: down"
    assert result.last_delivered_revision is None
    assert sink.closed


async def test_a_permanent_sink_error_stops_the_retries():
    c = turn()
    sink = RecordingSink(FinalOnly(), finish_errors=[SinkError("chat is gone", permanent=True)])
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket(), **FAST).start()
    c.complete()
    result = await handle.wait(timeout=2)
    assert (result.ok, result.attempts, result.error) == (False, 1, "SinkError: chat is gone")


async def test_each_finish_attempt_is_bounded_by_the_finish_timeout():
    c = turn()
    sink = RecordingSink(FinalOnly())
    sink.finish_gate = asyncio.Event()  # never set
    coordinator = DeliveryCoordinator(
        c, sink, PresentationPolicy.websocket(), finish_attempts=2, finish_timeout=0.01, retry_delays=(0.0,)
    )
    handle = coordinator.start()
    c.complete()
    result = await handle.wait(timeout=2)
    assert not result.ok and result.attempts == 2
    assert "timed out" in result.error


async def test_not_modified_on_finish_counts_as_delivered():
    c = turn()
    sink = RecordingSink(FinalOnly(), finish_errors=[SinkNotModified("same content")])
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket(), **FAST).start()
    c.complete()
    result = await handle.wait(timeout=2)
    assert result.ok and result.attempts == 1 and result.last_delivered_revision == c.revision


async def test_each_published_snapshot_is_filtered_and_serialised_exactly_once(monkeypatch):
    dumped: list[int] = []
    real_dumps = presentation.json.dumps

    def counting_dumps(obj, **kwargs):
        dumped.append(obj["revision"])
        return real_dumps(obj, **kwargs)

    monkeypatch.setattr(presentation.json, "dumps", counting_dumps)
    c = turn()
    policy = CountingPolicy()
    sink = RecordingSink(Snapshot(0.0), finish_errors=[ConnectionError("x"), ConnectionError("y")])
    handle = DeliveryCoordinator(c, sink, policy, **FAST).start()
    await until(lambda: sink.updates)
    for step in range(5):
        for _ in range(3):
            c.apply(TextDelta(0, "z"))
        await until(lambda step=step: len(sink.updates) == step + 2)
    c.complete()
    assert (await handle.wait(timeout=2)).ok
    published = sink.update_revisions + [c.revision]
    assert policy.revisions == published
    assert dumped == published
    assert len(sink.finishes) == 3
    assert len({id(payload) for _, payload in sink.finishes}) == 1, "retries reuse the one payload"


async def test_hidden_reasoning_never_reaches_the_sink():
    c = turn()
    sink = RecordingSink(Snapshot(0.0))
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.external()).start()
    c.apply(ReasoningDelta(0, "private chain of thought"))
    await until(lambda: sink.updates and sink.updates[-1][0].revision == 1)
    c.apply(TextDelta(0, "answer"))
    c.complete()
    assert (await handle.wait(timeout=2)).ok
    for snapshot, payload in sink.updates + sink.finishes:
        assert "private chain" not in payload
        # What a sink reads off the snapshot object is the filtered view too (seed 003 §10.1).
        assert isinstance(snapshot, PresentedSnapshot)
        assert all(b["type"] != "reasoning" for b in snapshot.blocks)
        assert "private chain" not in repr(snapshot)
        assert snapshot.to_dict() == json.loads(payload), "the object and its JSON agree"


async def test_a_sink_gets_the_merged_answer_that_hiding_reasoning_leaves():
    c = turn()
    sink = RecordingSink(FinalOnly())
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.external()).start()
    c.apply(TextDelta(0, "The answer is "))
    c.apply(ReasoningDelta(0, "hmm"))
    c.apply(TextDelta(0, "42."))
    c.complete()
    assert (await handle.wait(timeout=2)).ok
    [(snapshot, payload)] = sink.finishes
    assert [(b["type"], b["text"]) for b in snapshot.blocks] == [("assistant", "The answer is 42.")]
    assert snapshot.answer_text() == "The answer is 42."
    assert json.loads(payload)["blocks"] == [dict(snapshot.blocks[0])]


async def test_a_turn_that_is_already_over_is_delivered_at_once():
    c = turn()
    c.apply(TextDelta(0, "a"))
    c.fail("provider error")
    sink = RecordingSink(Snapshot(0.0))
    result = await DeliveryCoordinator(c.cell, sink, PresentationPolicy.websocket()).start().wait(timeout=2)
    assert result.ok and sink.updates == []
    assert json.loads(sink.finishes[0][1])["status"] == "failed"


async def test_cancel_stops_delivery_and_still_closes_the_sink():
    c = turn()
    sink = RecordingSink(Snapshot(0.0))
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket()).start()
    await until(lambda: sink.updates)
    handle.cancel()
    result = await handle.wait(timeout=2)
    assert not result.ok and result.error == "delivery cancelled"
    assert result.last_delivered_revision == 0
    assert sink.close_calls == 1 and sink.finishes == []


async def test_wait_with_a_timeout_cancels_delivery_of_a_turn_that_never_ends():
    c = turn()
    sink = RecordingSink(FinalOnly())
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket()).start()
    result = await handle.wait(timeout=0.02)
    assert not result.ok and "timed out" in result.error
    assert sink.closed and handle.done
    c.complete()
    await settle()
    assert sink.finishes == [], "no late success can race the caller's fallback"


async def test_a_failing_close_is_logged_not_raised(caplog):
    c = turn()
    sink = RecordingSink(FinalOnly(), close_error=RuntimeError("close failed"))
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket()).start()
    c.complete()
    assert (await handle.wait(timeout=2)).ok
    assert "close failed" in caplog.text


async def test_start_errors_are_raised_by_start_not_reported_by_wait():
    c = turn()
    coordinator = DeliveryCoordinator(c, RecordingSink(), PresentationPolicy.websocket())
    handle = coordinator.start()
    with pytest.raises(DeliveryStartError):
        coordinator.start()
    handle.cancel()
    await handle.wait()

    class NoFinish:
        live_policy = FinalOnly()

        async def update(self, snapshot, payload_json): ...

        async def close(self): ...

    with pytest.raises(DeliveryStartError):
        DeliveryCoordinator(c, NoFinish(), PresentationPolicy.websocket()).start()  # type: ignore[arg-type]

    sink = RecordingSink()
    sink.live_policy = "fast"  # type: ignore[assignment]
    with pytest.raises(DeliveryStartError):
        DeliveryCoordinator(c, sink, PresentationPolicy.websocket()).start()


async def test_a_refusing_spawn_is_a_start_error_without_leaking_the_coroutine():
    def stopped_supervisor(coro):
        raise RuntimeError("supervisor stopped")

    sink = RecordingSink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DeliveryStartError, match="supervisor stopped"):
            DeliveryCoordinator(turn(), sink, PresentationPolicy.websocket()).start(spawn=stopped_supervisor)
    assert not sink.closed, "the caller still owns the sink"


def test_start_without_a_running_loop_is_a_start_error():
    with pytest.raises(DeliveryStartError):
        DeliveryCoordinator(turn(), RecordingSink(), PresentationPolicy.websocket()).start()


async def test_open_delivery_reports_an_open_failure_as_a_start_error():
    async def open_sink():
        raise ConnectionError("platform unreachable")

    with pytest.raises(DeliveryStartError, match="platform unreachable"):
        await open_delivery(turn(), open_sink, PresentationPolicy.external())


async def test_open_delivery_bounds_opening_by_its_timeout():
    async def open_sink():
        await asyncio.sleep(10)

    with pytest.raises(DeliveryStartError):
        await open_delivery(turn(), open_sink, PresentationPolicy.external(), open_timeout=0.01)


async def test_open_delivery_then_an_async_failure_is_reported_by_wait():
    c = turn()
    sink = RecordingSink(FinalOnly(), finish_errors=[ConnectionError("down")] * 3)

    async def open_sink():
        return sink

    handle = await open_delivery(c, open_sink, PresentationPolicy.external(), **FAST)
    c.complete()
    result = await handle.wait(timeout=2)
    assert not result.ok and result.attempts == 3 and sink.closed


async def test_a_stale_turn_stops_publishing_silently():
    c = turn()
    current = {"ok": True}
    sink = RecordingSink(Snapshot(0.0))
    handle = DeliveryCoordinator(
        c, sink, PresentationPolicy.websocket(), is_current=lambda: current["ok"]
    ).start()
    await until(lambda: sink.updates)
    current["ok"] = False
    c.apply(TextDelta(0, "from a stale owner"))
    c.complete()
    result = await handle.wait(timeout=2)
    assert (result.ok, result.error, result.attempts) == (False, "stale turn", 0)
    assert sink.update_revisions == [0] and sink.finishes == [] and sink.closed


async def test_cancel_before_the_task_ran_still_closes_the_sink_once():
    sink = RecordingSink(Snapshot(0.0))
    handle = DeliveryCoordinator(turn(), sink, PresentationPolicy.websocket()).start()
    handle.cancel()  # the task has not taken a single step yet
    result = await handle.wait(timeout=2)
    assert not result.ok and result.error == "delivery cancelled"
    assert sink.close_calls == 1 and sink.updates == [] and sink.finishes == []
