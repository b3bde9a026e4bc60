"""An in-process channel layer with O(1) sends (DESIGN §2, the embedded mode).

Channels' ``InMemoryChannelLayer`` sweeps every channel and every group member for expired
entries on *each* ``send``-side ``group_send`` and each ``receive``, starts one task per member
in ``group_send``, and ``deepcopy``s the message once per receiver. With a hundred sockets that
is most of the cost of a streamed snapshot. ``LocalChannelLayer`` keeps its interface, settings
(``capacity``, ``channel_capacity``, ``expiry``, ``group_expiry``) and semantics:

* a full channel raises ``ChannelFull`` on ``send`` and is skipped by ``group_send``;
* a message older than ``expiry`` is never received; its channel stays in its groups, as on
  channels_redis (a consumer that was merely slow is not dead; a dead one leaves its groups by
  ``group_expiry``, and meanwhile ``capacity`` bounds its queue);
* a member older than ``group_expiry`` leaves its group (members re-join to stay);
* every receiver gets its own copy of the message's containers (dicts, lists, tuples); strings,
  numbers and other immutable leaves are shared, as ``deepcopy`` shares them.

It differs only in *when* expiry is applied: expired messages are dropped when they reach the
head of a queue, and the sweep of channels and group members runs at most once per
``sweep_interval`` seconds (1 s, or a tenth of the shorter expiry). A channel's queue lives
while it holds messages or a receiver waits on it; the sweep forgets the others (not every
``receive``, which would build a new queue for each message of a busy channel).
"""

from __future__ import annotations

import asyncio
import time
from copy import deepcopy
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer

_SHARED_LEAVES = frozenset({str, int, float, bool, bytes, type(None)})


def copy_message(value: Any) -> Any:
    """A copy of a layer message: new dicts, lists and tuples; immutable leaves shared.

    Equivalent to ``deepcopy`` for what a layer may carry (msgpack-able values) at a fraction of
    its cost; anything else falls back to ``deepcopy``.
    """
    kind = type(value)
    if kind in _SHARED_LEAVES:
        return value
    if kind is dict:
        return {key: copy_message(item) for key, item in value.items()}
    if kind is list:
        return [copy_message(item) for item in value]
    if kind is tuple:
        return tuple(copy_message(item) for item in value)
    return deepcopy(value)


class LocalChannelLayer(InMemoryChannelLayer):
    """``InMemoryChannelLayer`` with constant-time ``send``/``group_send``/``receive`` (see module)."""

    def __init__(
        self,
        expiry: float = 60,
        group_expiry: float = 86400,
        capacity: int = 100,
        channel_capacity: dict | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            expiry=expiry,
            group_expiry=group_expiry,
            capacity=capacity,
            channel_capacity=channel_capacity,
            **kwargs,
        )
        self.sweep_interval = min(1.0, expiry / 10, group_expiry / 10)
        self._next_sweep = 0.0

    async def send(self, channel: str, message: dict) -> None:
        """Queue ``message`` on ``channel``. Raises ``ChannelFull`` at its capacity."""
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_channel_name(channel)
        assert "__asgi_channel__" not in message
        self._put(channel, copy_message(message), time.time() + self.expiry)

    def _put(self, channel: str, message: dict, expires_at: float) -> None:
        queue = self.channels.get(channel)
        if queue is None:
            queue = self.channels[channel] = asyncio.Queue(maxsize=self.get_capacity(channel))
        try:
            queue.put_nowait((expires_at, message))
        except asyncio.QueueFull:
            raise ChannelFull(channel) from None

    async def receive(self, channel: str) -> dict:
        """The next unexpired message of ``channel`` (waits for one)."""
        self.require_valid_channel_name(channel)
        self._sweep_if_due()
        queue = self.channels.get(channel)
        if queue is None or (
            queue.empty() and getattr(queue, "_loop", None) not in (None, asyncio.get_running_loop())
        ):
            # New, or kept empty from another event loop (asyncio.run twice, async_to_sync): a
            # queue that once waited is bound to its loop.
            queue = self.channels[channel] = asyncio.Queue(maxsize=self.get_capacity(channel))
        while True:
            expires_at, message = await queue.get()
            if expires_at >= time.time():
                return message

    def receive_nowait(self, channel: str) -> dict | None:
        """The next unexpired message of ``channel`` if one is queued, else None (never waits):
        a consumer drains a backlog in one go (``conversations.runtime.consumer_base.dispatch_channels``)."""
        queue = self.channels.get(channel)
        while queue is not None and not queue.empty():
            expires_at, message = queue.get_nowait()
            if expires_at >= time.time():
                return message
        return None

    async def group_send(self, group: str, message: dict) -> None:
        """Queue a copy of ``message`` on each member of ``group``; full members are skipped."""
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._sweep_if_due()
        members = self.groups.get(group)
        if not members:
            return
        expires_at = time.time() + self.expiry
        for channel in list(members):
            try:  # noqa: SIM105 - a with-block per member costs more than the put
                self._put(channel, copy_message(message), expires_at)
            except ChannelFull:
                pass

    async def group_add(self, group: str, channel: str) -> None:
        """Add ``channel`` to ``group`` (again: its membership is renewed)."""
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        self.groups.setdefault(group, {})[channel] = time.time()

    def _sweep_if_due(self) -> None:
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + self.sweep_interval
            self._clean_expired()

    def _clean_expired(self) -> None:
        """Drop expired messages (their channels keep their groups) and expired group members."""
        now = time.time()
        for channel, queue in list(self.channels.items()):
            while not queue.empty() and queue._queue[0][0] < now:  # type: ignore[attr-defined]
                queue.get_nowait()
            if queue.empty() and not queue._getters:  # type: ignore[attr-defined]  # nobody waits on it
                del self.channels[channel]
        joined_before = now - self.group_expiry
        for group, members in list(self.groups.items()):
            for channel in [name for name, joined in members.items() if joined < joined_before]:
                del members[channel]
            if not members:
                del self.groups[group]
