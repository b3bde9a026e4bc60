"""The scale-out mode's channel layer: channels_redis with fewer Redis round trips (DESIGN §2).

``channels_redis.core.RedisChannelLayer`` (4.3) spends four round trips on each ``group_send``
(expire old members, list the members, a ``MULTI`` to expire old messages of each member's key,
then an ``EVAL`` that sends the Lua text along) and three on each message it receives (an
``EVAL`` that restores the backup queue, ``BZPOPMIN``, a ``ZADD`` to the backup queue), plus one to
clear the backup. A streamed snapshot crosses both, so in the scale-out mode most of the CPU per
chunk was Redis round trips. :class:`RoundTripRedisChannelLayer` keeps the same keys, message
format, capacity, expiry and backup-queue semantics, and

* ``group_send``: one pipeline (expire old members + list them), then one ``EVALSHA`` that
  expires each key's old messages and adds the message where there is room;
* receiving: one ``EVALSHA`` that clears the backup queue (restoring its message to the channel
  when the receive that popped it did not complete), pops the oldest waiting message and backs it
  up; only when nothing waits does it block in ``BZPOPMIN`` as channels_redis does. The backup of
  a message that was handed over is dropped by that next call, not by a round trip of its own
  (channels_redis's ``ZPOPMIN`` cleaner), under the same per-channel lock.

Scripts go by SHA (``redis.asyncio`` ``Script``: loaded once per server, reloaded after a Redis
restart). Settings are those of ``RedisChannelLayer``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from channels_redis.core import RedisChannelLayer

logger = logging.getLogger("channels_redis.core")

_GROUP_SEND = """
local over_capacity = 0
local n = #KEYS
local now = tonumber(ARGV[2 * n + 1])
local expiry = tonumber(ARGV[2 * n + 2])
for i = 1, n do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, math.floor(now) - expiry)
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[i + n]) then
        redis.call('ZADD', KEYS[i], now, ARGV[i])
        redis.call('EXPIRE', KEYS[i], expiry)
    else
        over_capacity = over_capacity + 1
    end
end
return over_capacity
"""

_POP_WITH_BACKUP = """
if ARGV[1] ~= '1' then
    local backed_up = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
    for i = #backed_up, 1, -2 do
        redis.call('ZADD', KEYS[1], backed_up[i], backed_up[i - 1])
    end
end
redis.call('DEL', KEYS[2])
local popped = redis.call('ZPOPMIN', KEYS[1])
if #popped == 0 then
    return false
end
redis.call('ZADD', KEYS[2], popped[2], popped[1])
return popped[1]
"""


class RoundTripRedisChannelLayer(RedisChannelLayer):
    """``RedisChannelLayer`` with two round trips per ``group_send`` and one per received message
    that was already waiting (see module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._scripts: dict[tuple[int, str], Any] = {}
        self._handed_over: set[str] = set()  # channel keys whose backed-up message was received

    def _script(self, index: int, source: str) -> Any:
        script = self._scripts.get((index, source))
        if script is None:
            script = self._scripts[(index, source)] = self.connection(index).register_script(source)
        return script

    async def group_send(self, group: str, message: dict) -> None:
        """Send ``message`` to every member of ``group``; members at capacity are skipped (logged)."""
        assert self.require_valid_group_name(group), "Group name not valid"
        key = self._group_key(group)
        connection = self.connection(self.consistent_hash(group))
        async with connection.pipeline(transaction=False) as pipe:
            pipe.zremrangebyscore(key, min=0, max=int(time.time()) - self.group_expiry)
            pipe.zrange(key, 0, -1)
            _, members = await pipe.execute()
        channel_names = [member.decode("utf8") for member in members]
        if not channel_names:
            return
        keys_by_connection, message_by_key, capacity_by_key = self._map_channel_keys_to_connection(
            channel_names, message
        )
        for index, keys in keys_by_connection.items():
            args = [message_by_key[k] for k in keys] + [capacity_by_key[k] for k in keys]
            args += [time.time(), int(self.expiry)]
            over_capacity = await self._script(index, _GROUP_SEND)(keys=keys, args=args)
            if over_capacity > 0:
                logger.info("%s of %s channels over capacity in group %s", over_capacity, len(channel_names), group)

    async def _brpop_with_clean(self, index: int, channel: str, timeout: float) -> Any:
        """The oldest message of ``channel`` (backed up until it is processed), waiting up to
        ``timeout`` seconds; None when none came. Cancelling loses nothing (it stays backed up)."""
        backup_queue = self._backup_channel_name(channel)
        handed_over = channel in self._handed_over
        member = await self._script(index, _POP_WITH_BACKUP)(keys=[channel, backup_queue], args=[int(handed_over)])
        self._handed_over.discard(channel)
        if member:
            return member
        connection = self.connection(index)
        result = await connection.bzpopmin(channel, timeout=timeout)
        if result is None:
            return None
        _, member, score = result
        await connection.zadd(backup_queue, {member: float(score)})
        return member

    async def _clean_receive_backup(self, index: int, channel: str) -> None:
        """The message ``_brpop_with_clean`` backed up was handed over: the next pop of ``channel``
        drops its backup (channels_redis runs ``_clean_receive_backup`` after each received message,
        holding the channel's receive lock until it is done)."""
        self._handed_over.add(channel)
