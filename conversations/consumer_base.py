"""Consumer dispatch without Channels' per-message ORM clean-up (Django glue).

Channels (4.2 and later) runs ``close_old_connections`` in a worker thread before *every*
handler of a consumer, one thread round trip per frame received or layer message delivered.
PicoBot's consumers never touch the ORM on that thread: storage goes through ``run_storage``,
whose threads own their connections, and the auth middleware uses ``database_sync_to_async``,
which cleans up around its own calls. The hop is pure cost on the streaming path.
"""

from __future__ import annotations

from channels.consumer import get_handler_name


class LoopDispatch:
    """Mixin for an ``AsyncConsumer``: call the handler of a message directly on the loop."""

    async def dispatch(self, message: dict) -> None:
        """Raises ``ValueError`` for a message type without a handler, as Channels does."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)
