"""``LocalChannelLayer``: Channels' in-memory layer semantics at O(1) per send (delivery/local_layer.py)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from channels.exceptions import ChannelFull

from delivery import local_layer
from delivery.local_layer import LocalChannelLayer, copy_message


class FakeClock:
    """Stands in for the ``time`` module inside ``delivery.local_layer``."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(local_layer, "time", fake)
    return fake


async def test_a_message_goes_to_its_channel_as_a_private_copy():
    layer = LocalChannelLayer()
    sent = {"type": "turn.snapshot", "json": "x" * 100, "meta": {"ids": [1, 2]}, "pair": (1, [3])}
    await layer.send("a.one", sent)
    got = await layer.receive("a.one")
    assert got == sent
    assert (
        got is not sent and got["meta"] is not sent["meta"] and got["meta"]["ids"] is not sent["meta"]["ids"]
    )
    assert got["pair"][1] is not sent["pair"][1]
    assert got["json"] is sent["json"]  # immutable leaves are shared, as deepcopy shares them
    got["meta"]["ids"].append(3)
    assert sent["meta"]["ids"] == [1, 2]


def test_copy_message_falls_back_to_deepcopy_for_other_values():
    class Box:
        def __init__(self) -> None:
            self.items = [1]

    box = Box()
    copied = copy_message({"box": box, "n": None, "f": 1.5, "b": b"x", "t": True})
    assert copied["box"] is not box and copied["box"].items == [1] and copied["box"].items is not box.items
    assert copied["n"] is None and copied["f"] == 1.5 and copied["b"] == b"x" and copied["t"] is True


async def test_group_send_reaches_every_member_each_with_its_own_copy():
    layer = LocalChannelLayer()
    for name in ("a.one", "a.two", "a.three"):
        await layer.group_add("chat", name)
    await layer.group_send("chat", {"type": "x", "blocks": [{"t": 1}]})
    received = [await layer.receive(name) for name in ("a.one", "a.two", "a.three")]
    assert all(r == {"type": "x", "blocks": [{"t": 1}]} for r in received)
    assert len({id(r["blocks"]) for r in received}) == 3
    await layer.group_discard("chat", "a.two")
    await layer.group_send("chat", {"type": "y"})
    assert (await layer.receive("a.one"))["type"] == "y"
    assert "a.two" not in layer.channels or layer.channels["a.two"].empty()


async def test_a_full_channel_raises_on_send_and_is_skipped_by_group_send():
    layer = LocalChannelLayer(capacity=2)
    await layer.group_add("chat", "a.full")
    await layer.group_add("chat", "a.free")
    await layer.send("a.full", {"type": "m", "n": 1})
    await layer.send("a.full", {"type": "m", "n": 2})
    with pytest.raises(ChannelFull):
        await layer.send("a.full", {"type": "m", "n": 3})
    await layer.group_send("chat", {"type": "m", "n": 4})  # the full member is skipped, no error
    assert (await layer.receive("a.free"))["n"] == 4
    assert [(await layer.receive("a.full"))["n"] for _ in range(2)] == [1, 2]


async def test_an_expired_message_is_never_received_and_its_slow_channel_keeps_its_groups(clock):
    """A channel that reads late is slow, not dead: it stays subscribed, as on channels_redis
    (the fault matrix's ``layer-expire``: a socket that lost its groups got no live updates)."""
    layer = LocalChannelLayer(expiry=60)
    await layer.group_add("chat", "a.slow")
    await layer.group_add("chat", "a.other")
    await layer.send("a.slow", {"type": "old"})
    clock.now += 61
    await layer.send("a.slow", {"type": "new"})
    assert (await layer.receive("a.slow"))["type"] == "new"
    assert "a.slow" in layer.groups["chat"] and "a.other" in layer.groups["chat"]
    await layer.group_send("chat", {"type": "live"})
    assert (await layer.receive("a.slow"))["type"] == "live", "still a member: live updates reach it"


async def test_the_sweep_drops_expired_messages_and_old_group_members_at_most_once_per_interval(clock):
    layer = LocalChannelLayer(expiry=60, group_expiry=100)
    assert layer.sweep_interval == 1.0
    await layer.group_add("chat", "a.stale")
    await layer.send("a.idle", {"type": "old"})
    clock.now += 50
    await layer.group_add("chat", "a.fresh")
    clock.now += 60  # a.stale joined 110 s ago, a.idle's message is 110 s old
    await layer.group_send("chat", {"type": "ping"})  # sweeps first
    assert "a.stale" not in layer.groups["chat"] and "a.fresh" in layer.groups["chat"]
    assert "a.idle" not in layer.channels, "its expired message dropped, the empty queue forgotten"
    assert (await layer.receive("a.fresh"))["type"] == "ping"


async def test_receive_waits_for_a_send_and_the_sweep_forgets_empty_channels_nobody_waits_on(clock):
    layer = LocalChannelLayer()
    waiter = asyncio.ensure_future(layer.receive("a.one"))
    await asyncio.sleep(0)
    assert not waiter.done()
    await layer.send("a.one", {"type": "late"})
    assert (await asyncio.wait_for(waiter, 1))["type"] == "late"
    queue = layer.channels["a.one"]
    waiting = asyncio.ensure_future(layer.receive("a.one"))
    await asyncio.sleep(0)
    assert layer.channels["a.one"] is queue  # the next message of a busy channel reuses its queue
    await layer.send("a.busy", {"type": "m"})
    clock.now += 2
    await layer.group_send("chat", {"type": "sweep"})  # sweeps
    assert "a.one" in layer.channels and "a.busy" in layer.channels  # a receiver waits; a message waits
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    assert (await layer.receive("a.busy"))["type"] == "m"
    clock.now += 2
    await layer.group_send("chat", {"type": "sweep"})
    assert "a.one" not in layer.channels and "a.busy" not in layer.channels
    await layer.send("a.one", {"type": "again"})  # a forgotten channel works as a new one
    assert (await layer.receive("a.one"))["type"] == "again"


async def test_flush_forgets_channels_and_groups_and_names_stay_valid():
    layer = LocalChannelLayer()
    name = await layer.new_channel()
    layer.require_valid_channel_name(name)
    await layer.group_add("chat", name)
    await layer.send(name, {"type": "m"})
    await layer.flush()
    assert layer.channels == {} and layer.groups == {}
    await layer.group_send("chat", {"type": "nobody"})  # an unknown group is not an error
    with pytest.raises(AssertionError):
        await layer.send(name, "not a dict")  # type: ignore[arg-type]


def test_a_kept_queue_works_from_another_event_loop():
    """``asyncio.run`` twice, or ``async_to_sync`` from a command: a queue that waited in one loop
    is bound to it; an empty one is replaced for the next loop."""
    layer = LocalChannelLayer()

    async def round_trip() -> str:
        async def later() -> None:
            await asyncio.sleep(0.01)
            await layer.send("a.one", {"type": "x"})

        sending = asyncio.ensure_future(later())
        got = await asyncio.wait_for(layer.receive("a.one"), 2)  # waits: binds the queue to this loop
        await sending
        return got["type"]

    assert asyncio.run(round_trip()) == "x"
    assert asyncio.run(round_trip()) == "x"


async def test_receive_nowait_hands_over_queued_messages_in_order_and_never_waits(clock):
    layer = LocalChannelLayer(expiry=10)
    assert layer.receive_nowait("a.one") is None, "an unknown channel"
    await layer.group_add("g", "a.one")
    for n in range(3):
        await layer.send("a.one", {"type": "m", "n": n})
    clock.now += 11  # the first three expire
    await layer.send("a.one", {"type": "m", "n": 3})
    assert layer.receive_nowait("a.one") == {"type": "m", "n": 3}, "expired ones are skipped"
    assert "a.one" in layer.groups["g"], "as receive does, an expired message leaves the membership"
    assert layer.receive_nowait("a.one") is None, "empty"
