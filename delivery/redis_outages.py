"""The scale-out channel layer, surviving Redis restarts and outages (DESIGN §2, issue 16).

``channels_redis`` raises whatever redis-py raises, and every caller died of it: a consumer's
receive loop (Channels closed every WebSocket with 1011), the ``group_add`` of a handshake (HTTP
500, also the first one after Redis came back: the pool's connections were stale). The database
is the source of truth and layer messages are only notices (persist, then notify; clients
converge from storage: PROTOCOL §1 "Convergence"), so an unreachable Redis is treated like a
full channel — messages are dropped — and never as a failure of the caller.
:class:`OutageTolerantRedisChannelLayer` is :class:`~delivery.redis_layer.RoundTripRedisChannelLayer`
with these rules, for the errors in :data:`OUTAGE_ERRORS`:

* every call is tried twice at once (a restarted Redis leaves stale connections in the pool: the
  first command on each fails) and bounded by :data:`CALL_SECONDS` (reads have no socket timeout,
  see ``picobot_site.settings``: a silent network must not hang a caller);
* ``receive`` waits while Redis is unreachable, retrying with backoff (0.2 s doubling up to
  :data:`MAX_RETRY_SECONDS`): consumers never see the outage;
* ``group_add`` records the membership and returns within :data:`GROUP_ADD_SECONDS` (at once
  while an outage is known) even when Redis is unreachable or paused;
  ``group_discard`` forgets it and never raises; ``group_send`` drops the message (logged);
* ``send`` still raises (after the retry), logging nothing: its callers decide (a wake-up is
  found by the inbox scan, ``/api/ready`` reports the layer down, ``serve`` refuses to start
  without it);
* once an outage was seen (or a call met a stale connection: a restart), a task of the event
  loop probes Redis with the same backoff and, when it answers, adds every membership of this
  process again: a restarted Redis has forgotten them (without persistence), and a socket that
  misses live frames meanwhile converges from storage.

Each outage is logged once when seen and once when over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from delivery.redis_layer import RoundTripRedisChannelLayer

log = logging.getLogger(__name__)

OUTAGE_ERRORS: tuple[type[BaseException], ...] = (
    RedisConnectionError,  # refused, reset, closed by the server, loading (BusyLoadingError)
    RedisTimeoutError,
    OSError,
    TimeoutError,  # our own bound (CALL_SECONDS)
)
"""What an unreachable or restarting Redis raises; anything else is a bug and propagates."""

CALL_SECONDS = 5.0
"""Bound on one non-blocking layer call (``send``, ``group_send``, ``group_add``, the re-join)."""

GROUP_ADD_SECONDS = 1.0
"""Bound on one ``group_add`` (one try): the re-join adds a membership that did not make it."""

FIRST_RETRY_SECONDS = 0.2
MAX_RETRY_SECONDS = 2.0


class OutageTolerantRedisChannelLayer(RoundTripRedisChannelLayer):
    """``RoundTripRedisChannelLayer`` that outlives Redis restarts and outages (see module).

    Attributes:
        memberships: ``{group: {channel, …}}`` of this process, as ``group_add`` and
            ``group_discard`` left them: what is added again when Redis comes back.
        outages: How many outages this layer has seen begin (tests and logs).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memberships: defaultdict[str, set[str]] = defaultdict(set)
        self.outages = 0
        self._down = False
        self._rejoiners: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}

    async def _tried_twice(self, call: Any, *args: Any) -> Any:
        """``await call(*args)``, tried again at once after an outage error (raised when both
        fail: the caller decides whether that is an outage to absorb)."""
        try:
            async with asyncio.timeout(CALL_SECONDS):
                return await call(*args)
        except OUTAGE_ERRORS:
            pass  # a stale connection of the pool (dropped now; the retry makes a new one)?
        async with asyncio.timeout(CALL_SECONDS):
            result = await call(*args)
        # It was: Redis restarted, and may have forgotten this process's memberships.
        self._schedule_rejoin()
        return result

    async def send(self, channel: str, message: dict) -> None:
        """As ``RedisChannelLayer.send``; raises an :data:`OUTAGE_ERRORS` error when Redis is
        unreachable (twice)."""
        await self._tried_twice(super().send, channel, message)

    async def group_send(self, group: str, message: dict) -> None:
        """Send to every member of ``group``; dropped (logged) when Redis is unreachable."""
        try:
            await self._tried_twice(super().group_send, group, message)
        except OUTAGE_ERRORS as exc:
            self._outage_seen(exc)
            log.debug("channel layer unreachable: a %s message to %s dropped", message.get("type"), group)

    async def group_add(self, group: str, channel: str) -> None:
        """Add ``channel`` to ``group`` now, or once Redis answers again; never raises for an
        outage, and waits at most :data:`GROUP_ADD_SECONDS` (nothing while an outage is known):
        a WebSocket handshake waits on it, and Daphne drops one that takes 5 s (a paused Redis)."""
        self.memberships[group].add(channel)
        if self._down:  # recorded: the re-join adds it when Redis answers
            return
        try:
            async with asyncio.timeout(GROUP_ADD_SECONDS):
                await super().group_add(group, channel)
        except OUTAGE_ERRORS as exc:  # a stale connection of a restarted Redis too: re-joined soon
            self._outage_seen(exc)

    async def group_discard(self, group: str, channel: str) -> None:
        """Remove ``channel`` from ``group``; never raises for an outage (a member left behind
        expires with ``group_expiry``, and its messages with ``expiry``)."""
        members = self.memberships.get(group)
        if members is not None:
            members.discard(channel)
            if not members:
                del self.memberships[group]
        try:
            await self._tried_twice(super().group_discard, group, channel)
        except OUTAGE_ERRORS as exc:
            self._outage_seen(exc)

    async def receive(self, channel: str) -> dict:
        """The next message of ``channel``, waiting (and retrying) while Redis is unreachable."""
        delay = FIRST_RETRY_SECONDS
        while True:
            try:
                return await super().receive(channel)
            except OUTAGE_ERRORS as exc:
                self._outage_seen(exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_SECONDS)

    async def close_pools(self) -> None:
        task = self._rejoiners.pop(asyncio.get_running_loop(), None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await super().close_pools()

    # --- outages ------------------------------------------------------------------------------
    def _outage_seen(self, exc: BaseException) -> None:
        if not self._down:
            self._down = True
            self.outages += 1
            log.warning(
                "channel layer: Redis unreachable (%s: %s); messages are dropped and sockets stay "
                "open until it is back",
                type(exc).__name__,
                exc,
            )
        self._schedule_rejoin()

    def _schedule_rejoin(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._rejoiners.get(loop)
        if task is None or task.done():
            self._rejoiners[loop] = loop.create_task(self._rejoin_when_back())

    async def _rejoin_when_back(self) -> None:
        """Probe Redis with backoff; once it answers, add every recorded membership again."""
        delay = FIRST_RETRY_SECONDS
        while True:
            await asyncio.sleep(delay)
            try:
                async with asyncio.timeout(CALL_SECONDS):
                    joined = await self._rejoin_all()
            except OUTAGE_ERRORS:
                delay = min(delay * 2, MAX_RETRY_SECONDS)
                continue
            if self._down:
                self._down = False
                log.warning("channel layer: Redis reachable again; %d group memberships re-joined", joined)
            else:
                log.info("channel layer: Redis restarted; %d group memberships re-joined", joined)
            return

    async def _rejoin_all(self) -> int:
        """``ZADD`` every recorded membership (one pipeline per shard; a ``PING`` when there are
        none). Returns how many memberships were added."""
        by_index: defaultdict[int, dict[str, list[str]]] = defaultdict(dict)
        for group, channels in list(self.memberships.items()):
            if channels:
                by_index[self.consistent_hash(group)][self._group_key(group)] = list(channels)
        if not by_index:
            for index in range(len(self.hosts)):
                await self.connection(index).ping()
            return 0
        now = time.time()
        for index, keys in by_index.items():
            async with self.connection(index).pipeline(transaction=False) as pipe:
                for key, channels in keys.items():
                    pipe.zadd(key, dict.fromkeys(channels, now))
                    pipe.expire(key, self.group_expiry)
                await pipe.execute()
        return sum(len(channels) for keys in by_index.values() for channels in keys.values())
