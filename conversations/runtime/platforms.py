"""External chat platforms the runtime delivers to (seed 003 §10, seed 000 §10): a registry.

The runtime knows the cli_chat WebSocket itself; every other platform (Feishu) registers a
:class:`PlatformAdapter` for its channel name when it is configured
(``conversations.apps.ConversationsConfig.ready``), so the layers stay one-way: the platform
package imports the runtime, never the reverse. The worker then opens that platform's sink for
its dialogs' turns, sends their plain messages through its sender, and tells its chats what a
cli_chat client would get as a ``notification`` frame.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from conversations import storage
    from delivery.outbound import OutboundSender
    from delivery.presentation import PresentationPolicy
    from delivery.sinks import TurnSink

__all__ = ["PlatformAdapter", "adapter_for", "adapters", "register", "unregister"]


class PlatformAdapter(Protocol):
    """One external platform, as the runtime uses it.

    Attributes:
        channel: The platform's channel name in dialog ids (``"feishu"``).
        sender: The outbound dispatcher's sender for complete messages (the plain fallback).
        presentation: What the platform may see of a turn (seed 003 §11: reasoning hidden).
    """

    channel: str
    sender: OutboundSender
    presentation: PresentationPolicy

    async def open_sink(self, start: storage.TurnStart) -> TurnSink:
        """The turn's sink (no network I/O before the first visible snapshot). May raise."""
        ...

    async def notify(
        self,
        chat_id: str,
        level: str,
        content: str,
        *,
        key: str,
        session_id: str | None = None,
        on_settled: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Tell the chat something outside any turn's answer (a notice, a command's late answer).
        ``key`` is the idempotency key of the message (the same notice is sent once). Best
        effort: never raises for delivery problems (it logs them). ``on_settled`` is awaited once
        no further attempt is needed: the platform confirmed the message, or refused it for good
        (the chat no longer takes the bot's messages); never when its outcome is unknown."""
        ...

    async def start(self) -> None:
        """Called by the agent worker once it runs (``serve``, ``runagent``): the platform's
        receivers and background loops start here."""
        ...

    async def stop(self, timeout: float = 5.0) -> None:
        """Called by the agent worker when it stops, after its own delivery ended."""
        ...

    async def interrupted(self, turn: dict, answer: str) -> None:
        """A turn of this platform died with its process (DESIGN §3): deliver its one final —
        ``answer`` is what the takeover committed of it (may be empty) — where its answer was
        shown. ``turn`` is an item of ``storage.interrupt_started``. Never raises."""
        ...


_adapters: dict[str, PlatformAdapter] = {}


def register(adapter: PlatformAdapter) -> None:
    """Makes ``adapter`` the platform of its channel (replacing an earlier one)."""
    _adapters[adapter.channel] = adapter


def unregister(channel: str) -> None:
    """Forgets the platform of ``channel`` (tests; a no-op when none is registered)."""
    _adapters.pop(channel, None)


def adapter_for(channel: str) -> PlatformAdapter | None:
    """The registered platform of ``channel``, or None (cli_chat, or a platform not configured)."""
    return _adapters.get(channel)


def adapters() -> list[PlatformAdapter]:
    """Every registered platform."""
    return list(_adapters.values())
