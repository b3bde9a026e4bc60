"""``dispatch_channels``: a consumer's layer backlog is dispatched in one go.

Channels' consumer loop waits one event-loop iteration (and starts a task) per message; on a busy
loop that queued 500 dialog wake-ups for 6–16 s. Counted here in loop iterations, not seconds.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import InMemoryChannelLayer

from conversations.runtime.consumer_base import dispatch_channels
from delivery.local_layer import LocalChannelLayer


async def _run_until(got: list, count: int, layer, channels: list[str]) -> int:
    """Iterations of the event loop until ``count`` messages were dispatched (at most 1 000)."""

    async def dispatch(message: dict) -> None:
        got.append((message["type"], message["n"]))

    task = asyncio.ensure_future(dispatch_channels(layer, channels, dispatch))
    try:
        for iteration in range(1, 1001):
            await asyncio.sleep(0)
            if len(got) >= count:
                return iteration
        raise AssertionError(f"only {len(got)} of {count} dispatched")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_backlog_is_dispatched_in_a_few_loop_iterations_in_order():
    layer = LocalChannelLayer(capacity=1000)
    for n in range(500):
        await layer.send("agent", {"type": "dialog.input", "n": n})
    await layer.send("own.1", {"type": "dialog.stop", "n": 0})
    got: list = []
    iterations = await _run_until(got, 501, layer, ["agent", "own.1"])
    assert iterations <= 10, iterations  # Channels' loop: three per message, 1 500
    assert [n for kind, n in got if kind == "dialog.input"] == list(range(500)), "in order"
    assert ("dialog.stop", 0) in got


async def test_a_layer_without_receive_nowait_still_gets_every_message():
    layer = InMemoryChannelLayer(capacity=100)
    for n in range(20):
        await layer.send("agent", {"type": "dialog.input", "n": n})
    got: list = []
    await _run_until(got, 20, layer, ["agent"])
    assert [n for _, n in got] == list(range(20))


async def test_a_failing_handler_ends_the_loop_with_its_error_and_cancels_the_receives():
    layer = LocalChannelLayer()
    await layer.send("agent", {"type": "dialog.input", "n": 1})

    async def dispatch(message: dict) -> None:
        raise ValueError("No handler for message type dialog.input")

    with pytest.raises(ValueError, match="No handler"):
        await asyncio.wait_for(dispatch_channels(layer, ["agent", "own.1"], dispatch), 5)
    assert not any(q._getters for q in layer.channels.values()), "no receive left waiting"


@pytest.mark.django_db(transaction=True)
async def test_the_worker_restarts_its_consumer_after_a_bad_message_and_keeps_the_backlog(start_worker):
    from channels.layers import get_channel_layer

    from conversations.runtime.agent_channel import AGENT_CHANNEL, WORKERS_GROUP
    from providers.testing import ScriptedProvider

    worker = await start_worker(ScriptedProvider([]))
    layer = get_channel_layer()
    woken: list[str] = []
    worker.wake = lambda dialog_id, **_: woken.append(dialog_id)
    first_channel = worker.consumer_channel
    await layer.send(AGENT_CHANNEL, {"type": "dialog.input", "dialog_id": "a"})
    await layer.send(AGENT_CHANNEL, {"type": "no.such.handler"})
    await layer.send(AGENT_CHANNEL, {"type": "dialog.input", "dialog_id": "b"})
    for _ in range(200):  # the restart waits 0.5 s first
        if "b" in woken:
            break
        await asyncio.sleep(0.05)
    assert woken == ["a", "b"], "the message after the bad one was kept for the restarted consumer"
    assert worker.consumer_channel != first_channel
    assert worker.consumer_channel in layer.groups[WORKERS_GROUP], "the new channel joined the workers group"
