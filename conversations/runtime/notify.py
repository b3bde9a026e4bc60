"""Publishing to a chat's WebSocket clients through the channel layer (persist first, then notify).

Every frame is serialised once and travels as ``{"type": "chat.frame", "json": <text>}`` to the
chat's group; each ``ChatConsumer`` forwards the text unchanged. ``group_send`` may drop messages
(DESIGN §2): nothing here is the only copy of anything durable — clients converge through
``history_revision``, ``ready.running`` and terminal snapshots.
"""

from __future__ import annotations

import functools
import json
import uuid
from dataclasses import dataclass
from typing import Any

from channels.layers import get_channel_layer

from conversations import storage
from conversations.runtime import platforms
from conversations.storage import TURN_INTERRUPTED_ERROR, CommitResult
from conversations.storage.runner import run_storage
from delivery.groups import chat_group
from delivery.platforms.cli_chat import CliChatSink
from delivery.presentation import PresentationPolicy, serialize_snapshot
from delivery.snapshot import TurnSnapshot
from delivery.turn import TurnController

# Above any revision a real turn reaches (2^31 changes), below JavaScript's 2^53 safe integers.
RECOVERY_REVISION = 2**40
INTERRUPTED_NOTICE = "Your last turn was interrupted by a server restart; send it again if you still need it."


def group_for(channel: str, chat_id: str) -> str:
    """The channel-layer group of a chat's WebSocket connections."""
    return chat_group(channel, chat_id)


def session_changed(dialog: Any, *, active: bool, deleted: bool = False) -> dict:
    """A ``session_changed`` frame for ``dialog`` (PROTOCOL §1): created, switched to, renamed
    (by the user or a generated title) or deleted."""
    frame = {
        "type": "session_changed",
        "session_id": dialog.id,
        "dialog_id": dialog.dialog_id,
        "title": dialog.title,
        "active": active,
    }
    if deleted:
        frame["deleted"] = True
    return frame


def dumps(frame: dict) -> str:
    """Compact JSON text of a frame (UTF-8 kept as is)."""
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


async def publish_frame(
    channel: str, chat_id: str, frame: dict, *, skip_channel: str | None = None, meta: dict | None = None
) -> None:
    """Send one server frame to every connection of the chat (best effort).

    ``skip_channel``: a connection that already sent the frame to its client itself (so that it
    arrives in order with that connection's direct answers) and must not get it twice.
    ``meta``: extra keys of the layer message for the consumers (never sent to clients), e.g.
    ``committed_turn_id`` (``publish_turn_committed``).
    """
    message = {"type": "chat.frame", "json": dumps(frame), **(meta or {})}
    if skip_channel:
        message["skip"] = skip_channel
    await get_channel_layer().group_send(group_for(channel, chat_id), message)


async def publish_notification(
    channel: str,
    chat_id: str,
    level: str,
    content: str,
    *,
    session_id: str | None = None,
    key: str | None = None,
    meta: dict | None = None,
) -> None:
    """A ``notification`` frame (PROTOCOL §1): system notices, never part of history.

    ``key`` names the notice: the frame's ``id`` (clients show an id once); ``meta``: extra keys
    of the layer message (``publish_frame``). A chat of a
    registered external platform (``runtime.platforms``) gets it as a message of its own, sent
    once per ``key`` (a random one when None).
    """
    adapter = platforms.adapter_for(channel)
    if adapter is not None:
        await adapter.notify(chat_id, level, content, key=key or uuid.uuid4().hex, session_id=session_id)
        return
    frame = {"type": "notification", "level": level, "content": content}
    if session_id:
        frame["session_id"] = session_id
    if key:
        frame["id"] = key
    await publish_frame(channel, chat_id, frame, meta=meta)


async def publish_kept_notice(
    channel: str, chat_id: str, level: str, content: str, *, session_id: str, notice_id: str
) -> None:
    """A notice its row keeps until a client received it (``storage.notices``: a missed or
    refused scheduled run, an interrupted task): broadcast now with the ``id`` ``notice_id``.

    A WebSocket chat's connections each mark it received once they sent it on (``kept_notice``),
    and if none was open the chat's next connection gets it on ``ready`` (clients show an id
    once). An external platform's chat gets it as a message, marked sent once the platform
    confirmed it (or refused it for good); until then the platform's recovery scan sends it
    again with the same key (``storage.unsent_platform_notices``).
    """
    adapter = platforms.adapter_for(channel)
    if adapter is None:
        await publish_notification(
            channel,
            chat_id,
            level,
            content,
            session_id=session_id,
            key=notice_id,
            meta={"kept_notice": {"id": notice_id}},
        )
        return
    mark_sent = functools.partial(run_storage, storage.mark_automation_notices_sent, [notice_id])
    await adapter.notify(chat_id, level, content, key=notice_id, session_id=session_id, on_settled=mark_sent)


async def publish_turn_committed(channel: str, chat_id: str, session_id: str, commit: CommitResult) -> None:
    """The ``turn_committed`` delta of a turn (seed 000 §11).

    The layer message names the turn and its user row (``committed_turn_id``,
    ``committed_inbox_id``): each connection sends one ``turn_committed`` per turn, this one or
    the one it rebuilt after the layer dropped this (``conversations.chat.reconcile``).
    """
    first = commit.messages[0] if commit.messages else {}
    meta = (
        {"committed_turn_id": first.get("turn_id"), "committed_inbox_id": first.get("id")} if first else None
    )
    await publish_frame(
        channel,
        chat_id,
        {
            "type": "turn_committed",
            "session_id": session_id,
            "history_revision": commit.history_revision,
            "messages": commit.messages,
        },
        meta=meta,
    )


def interrupted_notice_id(turn_id: str) -> str:
    """The ``notification`` id of a turn's interrupted notice: clients show each id once."""
    return f"interrupted:{turn_id}"


@dataclass(frozen=True)
class InterruptedNotice:
    """What a chat is told about a turn that died with its process (DESIGN §3).

    Built once by :func:`interrupted_notice`, sent two ways: broadcast to the chat's group when a
    worker takes the dialog over (:func:`publish_interrupted`), and to each connection on
    ``ready`` until one received it (``ChatConsumer``, ``storage.pending_interrupted_notices``).
    Both paths send the same revision and notification ``id``, so a client that gets both shows
    the turn failed once and the notice once.

    Attributes:
        turn_id, session_id: the turn and its dialog.
        revision: the terminal snapshot's revision (``RECOVERY_REVISION``: above any real one).
        snapshot: the presented terminal ``failed`` snapshot (what a sink may see).
        payload: its serialised turn object (the ``turn`` of a ``turn_updated`` frame; the
            consumer sends it through its credit window, the broadcast through the sink).
        notification: the warning ``notification`` frame (with ``id`` and ``turn_id``).
    """

    turn_id: str
    session_id: str
    revision: int
    snapshot: TurnSnapshot
    payload: str
    notification: dict

    @property
    def notification_text(self) -> str:
        """The ``notification`` frame text."""
        return dumps(self.notification)


def interrupted_notice(turn: dict) -> InterruptedNotice:
    """The terminal ``failed`` snapshot and the warning of an interrupted turn.

    ``turn`` is an item of ``storage.interrupt_started`` or ``storage.pending_interrupted_notices``
    (``turn_id``, ``session_id``, ``message_id``).
    """
    controller = TurnController(
        turn["turn_id"], turn["session_id"], turn["message_id"], first_revision=RECOVERY_REVISION
    )
    controller.fail(TURN_INTERRUPTED_ERROR)  # the words the user row's ``outcome`` keeps
    view = PresentationPolicy.websocket().present(controller.snapshot())  # what a sink may see
    notification = {
        "type": "notification",
        "level": "warning",
        "content": INTERRUPTED_NOTICE,
        "session_id": turn["session_id"],
        "id": interrupted_notice_id(turn["turn_id"]),
        "turn_id": turn["turn_id"],
    }
    return InterruptedNotice(
        turn_id=view.id,
        session_id=view.session_id,
        revision=view.revision,
        snapshot=view,
        payload=serialize_snapshot(view, view.policy),
        notification=notification,
    )


async def publish_interrupted(turn: dict, committed: CommitResult | None = None) -> None:
    """Tell a chat that a turn died with its process: a terminal ``failed`` snapshot, the turn's
    ``turn_committed`` (``committed``: its user row, ``storage.interrupted_commit``), a notice.

    A turn of a registered external platform gets its one final there instead
    (``PlatformAdapter.interrupted``), with the answer text the takeover committed.

    ``turn`` is an item of ``storage.interrupt_started``. Without the terminal snapshot a client
    that saw the turn running would keep its spinner forever; without the ``turn_committed`` it
    would see the next turn's rows before this one's (a gap in ``seq``). Best effort (DESIGN §2):
    it reaches the connections open now, and a connection that sent it on marks the row's
    notice sent (``kept_notice``); otherwise ``notice_sent_at`` stays NULL and the next connection
    of the chat gets the same notice on ``ready``.
    """
    adapter = platforms.adapter_for(turn["channel"])
    if adapter is not None:
        answer = "".join(
            str(row.get("content") or "")
            for row in (committed.messages if committed is not None else [])
            if row.get("role") == "assistant"
        )
        await adapter.interrupted(turn, answer)
        return
    notice = interrupted_notice(turn)
    sink = CliChatSink(
        get_channel_layer(), group_for(turn["channel"], turn["chat_id"]), inbox_id=turn.get("inbox_id")
    )
    await sink.finish(notice.snapshot, notice.payload)
    if committed is not None:
        await publish_turn_committed(turn["channel"], turn["chat_id"], turn["session_id"], committed)
    kept = {"inbox_id": turn["inbox_id"]} if turn.get("inbox_id") else None
    await publish_frame(
        turn["channel"], turn["chat_id"], notice.notification, meta={"kept_notice": kept} if kept else None
    )
