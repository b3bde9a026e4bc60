"""Publishing to a chat's WebSocket clients through the channel layer (persist first, then notify).

Every frame is serialised once and travels as ``{"type": "chat.frame", "json": <text>}`` to the
chat's group; each ``ChatConsumer`` forwards the text unchanged. ``group_send`` may drop messages
(DESIGN §2): nothing here is the only copy of anything durable — clients converge through
``history_revision``, ``ready.running`` and terminal snapshots.
"""

from __future__ import annotations

import json

from channels.layers import get_channel_layer

from conversations.storage import CommitResult
from delivery.groups import chat_group
from delivery.platforms.cli_chat import CliChatSink
from delivery.presentation import PresentationPolicy, serialize_snapshot
from delivery.turn import TurnController

# Above any revision a real turn reaches (2^31 changes), below JavaScript's 2^53 safe integers.
RECOVERY_REVISION = 2**40
INTERRUPTED_NOTICE = "Your last turn was interrupted by a server restart; send it again if you still need it."


def group_for(channel: str, chat_id: str) -> str:
    """The channel-layer group of a chat's WebSocket connections."""
    return chat_group(channel, chat_id)


def dumps(frame: dict) -> str:
    """Compact JSON text of a frame (UTF-8 kept as is)."""
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


async def publish_frame(channel: str, chat_id: str, frame: dict, *, skip_channel: str | None = None) -> None:
    """Send one server frame to every connection of the chat (best effort).

    ``skip_channel``: a connection that already sent the frame to its client itself (so that it
    arrives in order with that connection's direct answers) and must not get it twice.
    """
    message = {"type": "chat.frame", "json": dumps(frame)}
    if skip_channel:
        message["skip"] = skip_channel
    await get_channel_layer().group_send(group_for(channel, chat_id), message)


async def publish_notification(
    channel: str, chat_id: str, level: str, content: str, *, session_id: str | None = None
) -> None:
    """A ``notification`` frame (PROTOCOL §1): system notices, never part of history."""
    frame = {"type": "notification", "level": level, "content": content}
    if session_id:
        frame["session_id"] = session_id
    await publish_frame(channel, chat_id, frame)


async def publish_turn_committed(channel: str, chat_id: str, session_id: str, commit: CommitResult) -> None:
    """The ``turn_committed`` delta of a turn (seed 000 §11)."""
    await publish_frame(
        channel,
        chat_id,
        {
            "type": "turn_committed",
            "session_id": session_id,
            "history_revision": commit.history_revision,
            "messages": commit.messages,
        },
    )


async def publish_interrupted(turn: dict) -> None:
    """Tell a chat that a turn died with its process: a terminal ``failed`` snapshot + a notice.

    ``turn`` is an item of ``storage.interrupt_started``. Without the terminal snapshot a client
    that saw the turn running would keep its spinner forever.
    """
    controller = TurnController(
        turn["turn_id"], turn["session_id"], turn["message_id"], first_revision=RECOVERY_REVISION
    )
    controller.fail("interrupted by a server restart")
    view = PresentationPolicy.websocket().present(controller.snapshot())  # what a sink may see
    payload = serialize_snapshot(view, view.policy)
    sink = CliChatSink(get_channel_layer(), group_for(turn["channel"], turn["chat_id"]))
    await sink.finish(view, payload)
    await publish_notification(
        turn["channel"], turn["chat_id"], "warning", INTERRUPTED_NOTICE, session_id=turn["session_id"]
    )
