"""Where a turn's output goes: the dialog's chat, its platform's sink and presentation policy."""

from __future__ import annotations

from channels.layers import get_channel_layer
from django.conf import settings

from conversations import storage
from conversations.runtime import notify
from delivery.platforms.cli_chat import CliChatSink
from delivery.presentation import PresentationPolicy
from delivery.sinks import TurnSink


def split_session_id(session_id: str) -> tuple[str, str]:
    """``(channel, chat_id)`` of a unified id ``"{channel}:{chat_id}:{dialog_id}"`` (seed 004 §2.2)."""
    channel, _, rest = session_id.partition(":")
    return channel, rest.rpartition(":")[0]


async def open_cli_chat_sink(start: storage.TurnStart) -> TurnSink:
    """The default sink factory: publish the turn to the chat's WebSocket group (seed 003 §10.2)."""
    return CliChatSink(
        get_channel_layer(),
        notify.group_for(start.channel, start.chat_id),
        min_interval=settings.PICOBOT.ws_snapshot_interval_ms / 1000,
        inbox_id=start.inbox_id,
    )


def presentation_for(channel: str) -> PresentationPolicy:
    """The presentation policy of a platform (seed 003 §11 defaults)."""
    return PresentationPolicy.websocket() if channel == "cli_chat" else PresentationPolicy.external()
