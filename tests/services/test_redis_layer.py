"""The channels-redis layer as PicoBot configures it (PICOBOT_REDIS_URL), against real Redis."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from channels.layers import get_channel_layer
from django.test import override_settings

from tests.services.conftest import require_service

pytestmark = [pytest.mark.services]


def redis_layers(url: str) -> dict:
    """CHANNEL_LAYERS exactly as settings.py builds them for ``url``."""
    import importlib
    import os

    from picobot_site import settings as picobot_settings

    old = os.environ.get("PICOBOT_REDIS_URL")
    os.environ["PICOBOT_REDIS_URL"] = url
    try:
        return importlib.reload(picobot_settings).CHANNEL_LAYERS
    finally:
        if old is None:
            del os.environ["PICOBOT_REDIS_URL"]
        else:
            os.environ["PICOBOT_REDIS_URL"] = old
        importlib.reload(picobot_settings)


async def test_an_idle_receive_outlives_the_redis_client_default_read_timeout():
    url = require_service("PICOBOT_TEST_REDIS_URL")
    with override_settings(CHANNEL_LAYERS=redis_layers(url)):
        from channels.layers import channel_layers

        channel_layers.backends = {}
        layer = get_channel_layer()
        channel = await layer.new_channel()
        # Nothing arrives for longer than redis-py's 5 s default socket timeout: the receive must
        # still be waiting (a socket timeout would raise redis TimeoutError instead).
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(layer.receive(channel), timeout=6.5)
        await layer.send(channel, {"type": "still.alive"})
        assert (await asyncio.wait_for(layer.receive(channel), timeout=5))["type"] == "still.alive"
        await layer.flush()
        channel_layers.backends = {}


@pytest.fixture
async def two_processes():
    """Two layers on one Redis, as two server processes hold them (each its own client prefix)."""
    url = require_service("PICOBOT_TEST_REDIS_URL")
    config = redis_layers(url)["default"]
    from delivery.redis_outages import OutageTolerantRedisChannelLayer

    assert config["BACKEND"] == "delivery.redis_outages.OutageTolerantRedisChannelLayer"
    layers = [
        OutageTolerantRedisChannelLayer(**{**config["CONFIG"], "prefix": "asgi-test-rt"}) for _ in range(2)
    ]
    yield layers
    await layers[0].flush()
    for layer in layers:
        await layer.close_pools()


async def test_group_send_reaches_every_member_across_processes_and_skips_a_full_one(two_processes):
    web, agent = two_processes
    watchers = [await web.new_channel() for _ in range(3)]
    other = await agent.new_channel()
    for channel in [*watchers, other]:
        await web.group_add("chat.7", channel)
    await agent.group_send("chat.7", {"type": "turn.snapshot", "revision": 1, "json": "é" * 10})
    for channel in [*watchers, other]:
        got = await asyncio.wait_for((web if channel in watchers else agent).receive(channel), 5)
        assert got == {"type": "turn.snapshot", "revision": 1, "json": "é" * 10}
    web.capacity = agent.capacity = 2  # the next two fill each process's key, the third is skipped
    for revision in (2, 3, 4):
        await agent.group_send("chat.7", {"type": "turn.snapshot", "revision": revision})
    got = [(await asyncio.wait_for(agent.receive(other), 5))["revision"] for _ in range(2)]
    assert got == [2, 3]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(agent.receive(other), 0.5)
    await web.group_discard("chat.7", watchers[0])
    await agent.group_send("chat.empty", {"type": "nobody"})  # no members: nothing, no error


async def test_a_cancelled_receive_loses_nothing_and_scripts_survive_a_script_flush(two_processes):
    web, agent = two_processes
    channel = await web.new_channel()
    waiting = asyncio.ensure_future(web.receive(channel))
    await asyncio.sleep(0.3)  # blocked in BZPOPMIN
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await agent.send(channel, {"type": "first"})
    assert (await asyncio.wait_for(web.receive(channel), 5))["type"] == "first", "restored from the backup"
    await agent.send(channel, {"type": "second"})
    await agent.send(channel, {"type": "third"})
    assert (await asyncio.wait_for(web.receive(channel), 5))[
        "type"
    ] == "second"  # waiting: popped by the script
    await web.connection(0).script_flush()  # a Redis restart forgets loaded scripts
    assert (await asyncio.wait_for(web.receive(channel), 5))["type"] == "third"
    await agent.group_add("g", channel)
    await agent.group_send("g", {"type": "after.flush"})
    assert (await asyncio.wait_for(web.receive(channel), 5))["type"] == "after.flush"
    with pytest.raises(TimeoutError):  # every message once: a handed-over backup is never restored
        await asyncio.wait_for(web.receive(channel), 1)
    for n in range(20):
        await agent.send(channel, {"type": "burst", "n": n})
    assert [(await asyncio.wait_for(web.receive(channel), 5))["n"] for _ in range(20)] == list(range(20))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(web.receive(channel), 1)


def test_the_layer_works_from_several_event_loops_and_closes_every_connection():
    """``async_to_sync(layer.group_send)`` from sync code runs each call in a new loop: the scripts
    run on that loop's client, and ``close_pools`` leaves no connection behind."""
    from asgiref.sync import async_to_sync

    from delivery.redis_layer import RoundTripRedisChannelLayer

    url = require_service("PICOBOT_TEST_REDIS_URL")
    layer = RoundTripRedisChannelLayer(hosts=[url], prefix="asgi-test-loops")
    for n in range(3):
        async_to_sync(layer.group_add)("g", "specific.x!y")
        async_to_sync(layer.group_send)("g", {"type": "m", "n": n})
    async_to_sync(layer.flush)()
    async_to_sync(layer.close_pools)()


async def test_receives_spread_over_several_hosts_get_every_message_once():
    """A channel without "!" is received round robin over the hosts (two Redis databases stand in
    for two servers): each message once, none restored from a backup after it was handed over."""
    from urllib.parse import urlparse, urlunparse

    from delivery.redis_layer import RoundTripRedisChannelLayer

    url = require_service("PICOBOT_TEST_REDIS_URL")
    hosts = [urlunparse(urlparse(url)._replace(path=f"/{db}")) for db in (1, 2)]
    layer = RoundTripRedisChannelLayer(hosts=hosts, prefix="asgi-test-hosts")
    try:
        await layer.send("picobot.agent", {"type": "wake", "n": 1})
        await layer.send("picobot.agent", {"type": "wake", "n": 2})
        got = []
        for _ in range(5):
            try:
                got.append((await asyncio.wait_for(layer.receive("picobot.agent"), 1.5))["n"])
            except TimeoutError:
                got.append(None)
        assert sorted(n for n in got if n is not None) == [1, 2] and got.count(None) == 3
    finally:
        await layer.flush()
        await layer.close_pools()


async def test_local_channels_of_any_prefix_are_read_while_another_receive_waits(two_processes):
    """channels_redis reads one Redis key per process for all its local channels: a channel made
    with another prefix (``/api/ready``'s, a REST stop's reply) must still be read while a
    WebSocket consumer's receive holds the loop (it waited up to 5 s per round before)."""
    layer = two_processes[0]
    consumer = await layer.new_channel()
    reply = await layer.new_channel("picobot.api.ready")
    assert layer.non_local_name(reply) == layer.non_local_name(consumer), "one receive loop reads both"
    waiting = asyncio.ensure_future(layer.receive(consumer))
    await asyncio.sleep(0.2)  # the consumer's receive holds the loop, blocked in Redis
    await layer.send(reply, {"type": "api.ping"})
    got = await asyncio.wait_for(layer.receive(reply), timeout=4)  # below the loop's 5 s wait
    assert got["type"] == "api.ping"
    await layer.send(consumer, {"type": "for.the.consumer"})
    assert (await asyncio.wait_for(waiting, timeout=4))["type"] == "for.the.consumer"
