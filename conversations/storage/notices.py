"""Durable "your turn was interrupted" notices (DESIGN §3 InboxMessage).

When a worker takes over a dialog, ``turns.interrupt_started`` marks the rows a dead process left
``started`` as ``interrupted`` and the executor broadcasts a terminal ``failed`` snapshot and a
warning to the chat's group. That broadcast is best effort (DESIGN §2: ``group_send`` may drop, and
after a restart usually nobody is connected yet), so the row remembers whether its notice reached a
client: ``InboxMessage.notice_sent_at`` stays NULL until a connecting ``ChatConsumer`` sent it on
``ready`` and called :func:`mark_notices_sent`. The group broadcast does not set it: the layer
cannot tell whether anyone received it, and a notice seen twice is shown once (clients dedupe
``notification`` frames by ``id``; the credit window drops a second terminal snapshot).
"""

from __future__ import annotations

from collections.abc import Iterable

from conversations.models import InboxMessage, now_ms

# A chat rarely has more than one: one per dialog per crash. Older ones wait for the next connect.
MAX_NOTICES = 50


def pending_interrupted_notices(channel: str, chat_id: str, limit: int = MAX_NOTICES) -> list[dict]:
    """Interrupted turns of the chat's live dialogs whose notice no client has received yet.

    Returns items shaped like ``interrupt_started``'s — ``{turn_id, session_id, message_id,
    chat_id, channel}`` — plus ``inbox_id`` (for :func:`mark_notices_sent`), oldest first.
    Soft-deleted dialogs are left out (the user deleted them; nothing to tell).
    """
    rows = (
        InboxMessage.objects.filter(
            dialog__channel=channel,
            dialog__chat_id=chat_id,
            dialog__deleted_at__isnull=True,
            status=InboxMessage.Status.INTERRUPTED,
            notice_sent_at__isnull=True,
            turn_id__isnull=False,
        )
        .order_by("finished_at", "dialog_id", "position")
        .values_list("id", "turn_id", "reply_message_id", "dialog_id")[:limit]
    )
    return [
        {
            "inbox_id": str(inbox_id),
            "turn_id": str(turn_id),
            "session_id": dialog_id,
            "message_id": str(reply_id),
            "chat_id": chat_id,
            "channel": channel,
        }
        for inbox_id, turn_id, reply_id, dialog_id in rows
    ]


def mark_notices_sent(inbox_ids: Iterable[str]) -> int:
    """Record that the notices of these interrupted inbox rows reached a client.

    Only rows not marked yet are touched (the first time stays); returns how many were marked.
    """
    ids = [str(i) for i in inbox_ids]
    if not ids:
        return 0
    return InboxMessage.objects.filter(
        pk__in=ids, status=InboxMessage.Status.INTERRUPTED, notice_sent_at__isnull=True
    ).update(notice_sent_at=now_ms())
