"""The cli_chat (WebUI/TUI WebSocket) turn sink: publish each snapshot to the chat's group.

Every ``ChatConsumer`` of a chat is in its group (``delivery.groups.chat_group("cli_chat", chat)``)
and receives one layer message per published snapshot::

    {"type": "turn.snapshot", "turn_id": str, "session_id": str, "revision": int,
     "terminal": bool, "json": <the serialised, filtered turn object>,
     "inbox_id": str (optional: the turn's user message, so a connection that acked it
                      knows the turn is that message's without asking storage)}

The consumer's ``turn_snapshot`` handler runs its ``SnapshotCreditWindow`` and sends
``turn_updated_frame(message["json"])``: the JSON is built once per snapshot and shared by every
watcher (DESIGN §2, §7).

``group_send`` is fire-and-forget (dropped when a channel is full, expired after a while), so
``finish`` succeeds once the message is published (DESIGN §2); clients converge through the
terminal snapshot, ``ready`` and history. Errors of the layer itself (e.g. Redis down) propagate
and the coordinator retries ``finish``.

Complete messages (the one plain fallback after a failed turn delivery, seed 000 §5) go through
:class:`CliChatSender`, the cli_chat sender of the :class:`~delivery.outbound.OutboundDispatcher`:
a ``notification`` frame (PROTOCOL §1) published as ``{"type": "chat.frame", "json": <frame>}``,
which every ``ChatConsumer`` of the chat forwards unchanged.

No Django or Channels imports: the layer is passed in.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from delivery.groups import chat_group
from delivery.sinks import Snapshot

if TYPE_CHECKING:
    from delivery.outbound import OutboundMessage
    from delivery.snapshot import TurnSnapshot

__all__ = [
    "FRAME_MESSAGE_TYPE",
    "SNAPSHOT_MESSAGE_TYPE",
    "CliChatSender",
    "CliChatSink",
    "turn_updated_frame",
]

SNAPSHOT_MESSAGE_TYPE = "turn.snapshot"
#: A pre-serialised frame for every connection of a chat (``ChatConsumer.chat_frame``).
FRAME_MESSAGE_TYPE = "chat.frame"

_FRAME_HEAD = '{"type":"turn_updated","turn":'


class CliChatSink:
    """Publishes a turn's snapshots to every WebSocket of its chat (seed 003 §10.2).

    Args:
        channel_layer: A Channels layer (anything with ``async group_send(group, message)``).
        group: The chat's group name, from :func:`delivery.groups.chat_group`.
        min_interval: Seconds between running snapshots (≈30 per second by default).
        inbox_id: The turn's user message (its inbox row), carried in every layer message.
    """

    def __init__(
        self, channel_layer: Any, group: str, *, min_interval: float = 0.033, inbox_id: str | None = None
    ) -> None:
        self.channel_layer = channel_layer
        self.group = group
        self.live_policy = Snapshot(min_interval)
        self.inbox_id = inbox_id

    async def update(self, snapshot: TurnSnapshot, payload_json: str) -> None:
        """Publishes a running snapshot (network I/O with the Redis layer). Raises layer errors."""
        await self._publish(snapshot, payload_json)

    async def finish(self, snapshot: TurnSnapshot, payload_json: str) -> None:
        """Publishes the terminal snapshot; success means published. Raises layer errors."""
        await self._publish(snapshot, payload_json)

    async def close(self) -> None:
        """Nothing to release: the group outlives the turn."""

    async def _publish(self, snapshot: TurnSnapshot, payload_json: str) -> None:
        message = {
            "type": SNAPSHOT_MESSAGE_TYPE,
            "turn_id": snapshot.id,
            "session_id": snapshot.session_id,
            "revision": snapshot.revision,
            "terminal": snapshot.is_terminal,
            "json": payload_json,
        }
        if self.inbox_id is not None:
            message["inbox_id"] = self.inbox_id
        await self.channel_layer.group_send(self.group, message)


def turn_updated_frame(payload_json: str) -> str:
    """Returns the ``turn_updated`` text frame for a serialised turn, without re-serialising.

    Args:
        payload_json: A JSON object's text, as the coordinator produced it.

    Returns:
        ``'{"type":"turn_updated","turn":' + payload_json + '}'``.
    """
    return _FRAME_HEAD + payload_json + "}"


class CliChatSender:
    """Sends complete messages to every WebSocket of a cli_chat chat, as ``notification`` frames.

    Frame: ``{"type": "notification", "id": <message.id>, "level": …, "content": <text>,
    "session_id": …, "turn_id": …}`` (the last two when known). ``id`` is the message's
    idempotency key: a client that already showed a notification with that id drops the copy.

    Success means published (like :class:`CliChatSink`). A publish is at-most-once: ``group_send``
    is not idempotent and a timeout or layer error may come after the message went out, so the
    sender is not ``idempotent`` and the dispatcher does not call it again after such a failure
    (the result is "unknown", never "not sent"). Set ``idempotent`` to True only once every client
    drops copies by ``id``.

    Args:
        channel_layer: A Channels layer (anything with ``async group_send(group, message)``).
    """

    idempotent = False

    def __init__(self, channel_layer: Any) -> None:
        self.channel_layer = channel_layer

    async def __call__(self, message: OutboundMessage) -> None:
        frame: dict[str, Any] = {
            "type": "notification",
            "id": message.id,
            "level": message.level,
            "content": message.text,
        }
        if message.session_id:
            frame["session_id"] = message.session_id
        if message.turn_id:
            frame["turn_id"] = message.turn_id
        text = json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
        layer_message = {"type": FRAME_MESSAGE_TYPE, "json": text}
        if message.turn_id:
            # It stands in for the turn's final: a connection that has the final drops it, one
            # that lacks it looks the turn up first (``conversations.chat.reconcile``).
            layer_message["fallback_for"] = message.turn_id
        await self.channel_layer.group_send(chat_group(message.channel, message.chat_id), layer_message)
