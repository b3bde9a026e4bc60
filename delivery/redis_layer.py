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
* receiving: one ``EVALSHA`` that restores the backup queue, pops the oldest waiting message and
  backs it up, atomically (channels_redis pops and backs up in two commands, and a cancellation
  between them lost the message); only when nothing waits does it block in ``BZPOPMIN`` as
  channels_redis does. Clearing the backup after the message was handed over stays
  channels_redis's own ``ZPOPMIN`` under its per-channel lock.

Scripts go by SHA on the connection channels_redis gives for the running loop (one client per
loop and host), loaded with ``EVAL`` when Redis does not know them (first use, after a restart).
Settings are those of ``RedisChannelLayer``.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

from channels_redis.core import RedisChannelLayer
from redis.exceptions import NoScriptError

# channels_redis's logger, not ``__name__``: ``group_send`` below replaces channels_redis's own and
# logs the same "channels over capacity" record, so it stays where operators' logging settings for
# channels_redis already find (or silence) it.
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
local backed_up = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = #backed_up, 1, -2 do
    redis.call('ZADD', KEYS[1], backed_up[i], backed_up[i - 1])
end
redis.call('DEL', KEYS[2])
local popped = redis.call('ZPOPMIN', KEYS[1])
if #popped == 0 then
    return false
end
redis.call('ZADD', KEYS[2], popped[2], popped[1])
return popped[1]
"""

_SHA = {
    source: hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
    for source in (_GROUP_SEND, _POP_WITH_BACKUP)
}


class RoundTripRedisChannelLayer(RedisChannelLayer):
    """``RedisChannelLayer`` with two round trips per ``group_send`` and two per received message
    that was already waiting (see module)."""

    async def new_channel(self, prefix: str = "specific") -> str:
        """A new process-local channel; ``prefix`` is ignored. channels_redis reads all of a
        process's local channels through one receive loop on one Redis key,
        ``<prefix>.<client prefix>!``, that of whichever receiver holds its lock: a channel with
        another prefix was read only between that receiver's 5 s waits (``/api/ready`` answered
        503 and a REST stop 409 while any WebSocket was open on the process)."""
        return await super().new_channel()

    async def _run_script(self, index: int, source: str, keys: list, args: list) -> Any:
        connection = self.connection(index)
        try:
            return await connection.evalsha(_SHA[source], len(keys), *keys, *args)
        except NoScriptError:  # first use on this server, or Redis restarted
            return await connection.eval(source, len(keys), *keys, *args)

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
            over_capacity = await self._run_script(index, _GROUP_SEND, keys, args)
            if over_capacity > 0:
                logger.info(
                    "%s of %s channels over capacity in group %s", over_capacity, len(channel_names), group
                )

    async def _brpop_with_clean(self, index: int, channel: str, timeout: float) -> Any:
        """The oldest message of ``channel`` (backed up until it is processed), waiting up to
        ``timeout`` seconds; None when none came. Cancelling loses nothing (it stays backed up)."""
        backup_queue = self._backup_channel_name(channel)
        member = await self._run_script(index, _POP_WITH_BACKUP, [channel, backup_queue], [])
        if member:
            return member
        connection = self.connection(index)
        result = await connection.bzpopmin(channel, timeout=timeout)
        if result is None:
            return None
        _, member, score = result
        await connection.zadd(backup_queue, {member: float(score)})
        return member
