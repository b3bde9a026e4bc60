"""``OutageTolerantRedisChannelLayer`` against a private Redis that is stopped and restarted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from delivery.redis_outages import OUTAGE_ERRORS, OutageTolerantRedisChannelLayer
from tests.services.private_redis import PrivateRedis

pytestmark = [pytest.mark.services]


@pytest.fixture
async def redis() -> AsyncIterator[PrivateRedis]:
    async with PrivateRedis() as server:
        yield server


def make_layer(redis: PrivateRedis) -> OutageTolerantRedisChannelLayer:
    return OutageTolerantRedisChannelLayer(
        hosts=[{"address": redis.url, "socket_timeout": None, "socket_connect_timeout": 5}]
    )


async def members(layer: OutageTolerantRedisChannelLayer, group: str) -> set[str]:
    found = await layer.connection(layer.consistent_hash(group)).zrange(layer._group_key(group), 0, -1)
    return {member.decode() for member in found}


async def joined_again(layer: OutageTolerantRedisChannelLayer, group: str, channel: str) -> None:
    """Wait (30 s at most) until ``channel`` is a member of ``group`` in Redis again."""
    async with asyncio.timeout(30):
        while True:
            if channel in await members(layer, group):
                return
            await asyncio.sleep(0.1)


async def test_a_waiting_receive_outlives_a_restart_and_gets_what_is_sent_afterwards(redis):
    layer = make_layer(redis)
    channel = await layer.new_channel()
    waiting = asyncio.ensure_future(layer.receive(channel))
    await asyncio.sleep(0.2)
    await redis.restart(down_seconds=1.0)
    assert not waiting.done()  # no error reached the receiver
    await layer.send(channel, {"type": "after.restart"})
    assert (await asyncio.wait_for(waiting, 30))["type"] == "after.restart"
    assert layer.outages == 1
    await layer.close_pools()


async def test_memberships_are_joined_again_after_redis_restarted_empty(redis):
    layer = make_layer(redis)
    channel = await layer.new_channel()
    await layer.group_add("chat.cli_chat.1", channel)
    waiting = asyncio.ensure_future(layer.receive(channel))
    await redis.restart()
    await joined_again(layer, "chat.cli_chat.1", channel)  # by the layer, not by the test
    await layer.group_send("chat.cli_chat.1", {"type": "turn.snapshot"})
    assert (await asyncio.wait_for(waiting, 30))["type"] == "turn.snapshot"
    await layer.close_pools()


async def test_while_redis_is_down_group_calls_return_and_send_raises(redis):
    layer = make_layer(redis)
    channel = await layer.new_channel()
    await redis.stop()
    await layer.group_add("chat.cli_chat.2", channel)  # recorded, joined once Redis is back
    await layer.group_send("chat.cli_chat.2", {"type": "dropped"})  # dropped, like a full channel
    with pytest.raises(OUTAGE_ERRORS):
        await layer.send(channel, {"type": "refused"})
    await layer.group_discard("chat.cli_chat.3", channel)
    assert layer.memberships == {"chat.cli_chat.2": {channel}}
    await redis.start()
    await joined_again(layer, "chat.cli_chat.2", channel)
    await layer.group_discard("chat.cli_chat.2", channel)
    assert layer.memberships == {} and await members(layer, "chat.cli_chat.2") == set()
    await layer.close_pools()


async def test_a_paused_redis_does_not_hold_a_group_add_and_the_membership_is_joined_after(redis):
    """A paused (SIGSTOP) Redis answers nothing: ``group_add`` — which a WebSocket handshake
    waits on, and Daphne drops a handshake after 5 s — returns after one bounded try, and the
    re-join adds the membership once Redis runs again. Slow is not dead."""
    import signal

    from delivery.redis_outages import GROUP_ADD_SECONDS

    layer = make_layer(redis)
    channel = await layer.new_channel()
    await layer.group_add("chat.cli_chat.4", channel)  # the pool has a live connection
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        for n in range(3):  # a handshake joins several groups
            await asyncio.wait_for(layer.group_add(f"chat.paused.{n}", channel), GROUP_ADD_SECONDS + 3)
        assert layer.outages == 1, "one bounded try saw the outage; the others did not wait"
        assert layer.memberships.keys() >= {f"chat.paused.{n}" for n in range(3)}
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    for n in range(3):
        await joined_again(layer, f"chat.paused.{n}", channel)
    await layer.close_pools()
