"""Dialogs with history rows and their turn starts, for the context tests."""

from __future__ import annotations

from channels.db import database_sync_to_async

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.models import Dialog, Message
from conversations.storage import TurnStart, message_to_history_row


@database_sync_to_async
def seed(cycles: int, *, chars: int = 50, username: str = "alice", **fields) -> Dialog:
    """A dialog of ``cycles`` × (user, assistant) rows of ``chars`` characters, then one user row."""
    owner = get_or_create_user(username)[0]
    dialog = storage.active_dialog(owner, "cli_chat", f"chat-{username}")
    rows = []
    for n in range(cycles):
        rows.append(Message(dialog=dialog, seq=2 * n + 1, role="user", content=f"topic {n}: " + "q" * chars))
        rows.append(
            Message(dialog=dialog, seq=2 * n + 2, role="assistant", content=f"about {n}: " + "a" * chars)
        )
    rows.append(Message(dialog=dialog, seq=2 * cycles + 1, role="user", content="What now?"))
    Message.objects.bulk_create(rows)
    Dialog.objects.filter(pk=dialog.pk).update(history_revision=len(rows), **fields)
    return Dialog.objects.get(pk=dialog.pk)


def turn_start(dialog_id: str) -> TurnStart:
    """The TurnStart of the dialog's newest user row (as ``storage.start_next_turn`` builds it)."""
    dialog = Dialog.objects.get(pk=dialog_id)
    rows = Message.objects.filter(dialog=dialog, seq__gt=dialog.summary_seq).order_by("seq")
    return TurnStart(
        dialog_id=dialog.id,
        channel=dialog.channel,
        chat_id=dialog.chat_id,
        title=dialog.title,
        inbox_id="inbox",
        turn_id="turn",
        reply_message_id="reply",
        user_message={},
        history=[message_to_history_row(m) for m in rows],
        summary=dialog.summary,
        summary_seq=dialog.summary_seq,
        history_revision=dialog.history_revision,
    )


start_of = database_sync_to_async(turn_start)


@database_sync_to_async
def reload(dialog_id: str) -> Dialog:
    return Dialog.objects.get(pk=dialog_id)
