"""Consumer dispatch without Channels' per-message ORM clean-up (Django glue).

Channels (4.2 and later) runs ``close_old_connections`` in a worker thread before *every*
handler of a consumer, one thread round trip per frame received or layer message delivered.
PicoBot's consumers never touch the ORM on that thread: storage goes through ``run_storage``,
whose threads own their connections, and the auth middleware uses ``database_sync_to_async``,
which cleans up around its own calls. The hop is pure cost on the streaming path.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from channels.consumer import get_handler_name


class LoopDispatch:
    """Mixin for an ``AsyncConsumer``: call the handler of a message directly on the loop."""

    async def dispatch(self, message: dict) -> None:
        """Raises ``ValueError`` for a message type without a handler, as Channels does."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


async def dispatch_channels(
    layer: Any, channels: list[str], dispatch: Callable[[dict], Awaitable[None]]
) -> None:
    """Receive from ``channels`` and ``dispatch`` each message, one at a time, until cancelled; a
    failing receive or handler raises here.

    Channels' consumer loop (``await_many_dispatch``) starts a task for every message and waits a
    whole event-loop iteration for each; on a busy loop an iteration takes tens of milliseconds,
    and 500 dialog wake-ups queued behind one another took 6–16 s to reach the worker (measured).
    Here a channel's backlog is dispatched in one go where the layer can hand it over without
    waiting (``LocalChannelLayer.receive_nowait``); other layers behave as Channels does.
    """
    take = getattr(layer, "receive_nowait", None)
    sources = [functools.partial(layer.receive, channel) for channel in channels]
    tasks = [asyncio.ensure_future(source()) for source in sources]
    try:
        while True:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for i, task in enumerate(tasks):
                if not task.done():
                    continue
                await dispatch(task.result())
                if take is not None:
                    while (message := take(channels[i])) is not None:
                        await dispatch(message)
                tasks[i] = asyncio.ensure_future(sources[i]())
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
