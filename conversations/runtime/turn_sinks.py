"""Where a turn's output goes: the dialog's chat, its platform's sink and presentation policy."""

from __future__ import annotations

import dataclasses

from channels.layers import get_channel_layer
from django.conf import settings

from conversations import storage
from conversations.agent.automated_input import is_automated
from conversations.runtime import notify, platforms
from delivery.platforms.cli_chat import CliChatSink
from delivery.presentation import PresentationPolicy
from delivery.sinks import TurnSink

API_CHANNEL = "openai"
"""The channel of the OpenAI-compatible endpoint's one-request dialogs (issue 18): never listed
with a user's dialogs; published like a cli_chat chat (to its group, reasoning shown) for the
request that follows it."""


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


async def open_turn_sink(start: storage.TurnStart) -> TurnSink:
    """The worker's sink factory: the registered platform's sink for its chats
    (``runtime.platforms``), else the cli_chat sink."""
    adapter = platforms.adapter_for(start.channel)
    if adapter is not None:
        return await adapter.open_sink(start)
    return await open_cli_chat_sink(start)


def presentation_for(channel: str) -> PresentationPolicy:
    """The presentation policy of a platform (seed 003 §11 defaults; a registered platform's own)."""
    if channel in ("cli_chat", API_CHANNEL):
        return PresentationPolicy.websocket()
    adapter = platforms.adapter_for(channel)
    return adapter.presentation if adapter is not None else PresentationPolicy.external()


def presentation_for_turn(start: storage.TurnStart) -> PresentationPolicy:
    """The turn's policy: its platform's, final-only (no live snapshots) when its input is
    automated — a scheduled prompt or a task notification (``agent.automated_input``, issue 18)."""
    policy = presentation_for(start.channel)
    if is_automated(start.user_message.get("origin")):
        return dataclasses.replace(policy, live=False)
    return policy
