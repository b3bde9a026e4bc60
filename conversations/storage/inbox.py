"""The durable inbox of accepted user messages (DESIGN §3, seed 000 §6)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from conversations.agent.inbound import InboundMessage
from conversations.models import Dialog, InboxMessage, now_ms
from conversations.storage import sql
from conversations.storage.dialogs import resolve_dialog
from conversations.storage.shapes import (
    AcceptedMessage,
    BudgetExceededError,
    InboxFullError,
    NotFoundError,
    scrub_text,
    shown_ref,
)
from conversations.usage.budget import check_budget


def _queued_ahead(dialog_id: str, position: int) -> int:
    return InboxMessage.objects.filter(
        dialog_id=dialog_id,
        position__lt=position,
        status__in=[InboxMessage.Status.QUEUED, InboxMessage.Status.STARTED],
    ).count()


def _waiting_counts(dialog_id: str) -> dict[str, int]:
    """``{status: rows}`` of the dialog's queued and started inbox rows (one query)."""
    return dict(
        sql.fetch_all(
            f"SELECT status, COUNT(*) FROM {sql.INBOX} WHERE dialog_id = %s AND status IN (%s, %s) GROUP BY status",
            [dialog_id, InboxMessage.Status.QUEUED, InboxMessage.Status.STARTED],
        )
    )


def accept_message(
    owner: Any,
    channel: str,
    chat_id: str,
    content: str,
    *,
    session_id: str | None = None,
    client_msg_id: str | None = None,
    media: list | None = None,
    received_at: int | None = None,
    source: dict | None = None,
    channel_context: dict | None = None,
    model: str = "",
    instructions: str = "",
) -> AcceptedMessage:
    """Durably accept a user message into its dialog's inbox (the ``ack`` point, DESIGN §5).

    The dialog is ``session_id`` (which must be the owner's) or the chat's active dialog, resolved
    by ``resolve_dialog`` (a new one after the idle TTL). A repeated ``client_msg_id`` returns the
    existing row with ``duplicate=True`` and creates nothing. ``received_at`` (ms) becomes the
    user row's ``created_at``; ``source`` and the opaque ``channel_context`` are stored as given
    (seed 000 §10). ``model`` (a preset name, "" = the dialog's) and ``instructions`` (extra
    system text) apply to this message's turn only (the OpenAI-compatible endpoint, issue 18).

    Raises:
        NotFoundError: ``session_id`` is unknown, deleted or foreign, or a repeated
            ``client_msg_id`` names a message whose dialog was deleted.
        InboxFullError: the dialog already has ``PICOBOT_INBOX_CAPACITY`` queued messages.
        BudgetExceededError: the owner's daily budget is used up (``usage.budget``; issue 17).
    """
    client_msg_id, content, source = scrub_text(client_msg_id), scrub_text(content), scrub_text(source)
    if client_msg_id:
        user = "i.user_id = %s" if owner is not None else "i.user_id IS NULL"
        existing = sql.fetch_one(
            f"SELECT i.id, i.dialog_id, i.position, d.deleted_at FROM {sql.INBOX} i JOIN {sql.DIALOG} d "
            f"ON d.id = i.dialog_id WHERE {user} AND i.client_msg_id = %s",
            [*([owner.pk] if owner is not None else []), client_msg_id],
        )
        if existing is not None:
            inbox_id, dialog_id, position, deleted_at = existing
            if deleted_at is not None:
                # Acking it again would tell the client a message of a deleted dialog is accepted.
                raise NotFoundError("the dialog of this message was deleted")
            return AcceptedMessage(
                str(sql.as_uuid(inbox_id)), dialog_id, _queued_ahead(dialog_id, position), True
            )
    if owner is not None:  # after the repeat check: a message already accepted is acked again
        refused = check_budget(owner.pk)
        if refused is not None:
            raise BudgetExceededError(refused)
    resolved = resolve_dialog(owner, channel, chat_id, session_id)
    dialog = resolved.dialog
    capacity = settings.PICOBOT.inbox_capacity
    try:
        with transaction.atomic():
            # Bump the position first: the UPDATE locks the dialog row, so concurrent sends count
            # the queue one after the other (on PostgreSQL both could otherwise see 31 and both
            # insert). Raising rolls the bump back.
            sql.execute(
                f"UPDATE {sql.DIALOG} SET inbox_position = inbox_position + 1 WHERE id = %s", [dialog.pk]
            )
            waiting = _waiting_counts(dialog.pk)
            queued = waiting.get(InboxMessage.Status.QUEUED, 0)
            if queued >= capacity:
                raise InboxFullError(
                    f"the dialog already has {queued} queued message{'' if queued == 1 else 's'}"
                )
            position = sql.fetch_one(f"SELECT inbox_position FROM {sql.DIALOG} WHERE id = %s", [dialog.pk])[0]
            row = InboxMessage.objects.create(
                user=owner,
                dialog=dialog,
                position=position,
                client_msg_id=client_msg_id or None,
                content=content,
                media=media or [],
                received_at=received_at or now_ms(),
                source=source or {},
                channel_context=scrub_text(channel_context) or {},
                model=model,
                instructions=scrub_text(instructions) or "",
            )
    except IntegrityError:
        # A concurrent send with the same client_msg_id won the race: answer with its row.
        if not client_msg_id:
            raise
        existing = InboxMessage.objects.get(user=owner, client_msg_id=client_msg_id)
        return AcceptedMessage(
            str(existing.id), existing.dialog_id, _queued_ahead(existing.dialog_id, existing.position), True
        )
    return AcceptedMessage(
        str(row.id),
        dialog.id,
        sum(waiting.values()),  # every queued or started row is ahead of the one just made
        False,
        created_dialog=dialog if resolved.created else None,
        replaced_dialog=resolved.replaced,
    )


def accept_inbound(owner: Any, message: InboundMessage) -> AcceptedMessage:
    """``accept_message`` for a normalised ``InboundMessage`` (seed 000 §10): its sender, receive
    time and typed ``reply_to`` go into the stored ``source``, its ``channel_context`` alongside."""
    return accept_message(
        owner,
        message.channel,
        message.chat_id,
        message.content,
        session_id=message.session_id,
        client_msg_id=message.client_msg_id,
        media=list(message.media) or None,
        received_at=message.received_at,
        source=message.source(),
        channel_context=dict(message.channel_context),
    )


def accept_automated(dialog_id: str, content: str, source: dict) -> AcceptedMessage:
    """Queue input no person typed — a scheduled prompt's due run, a background task's
    notification (``agent.automated_input``, issue 18) — in a live dialog's inbox, as its owner's.

    It queues behind a running turn and survives a crash like any accepted message; the caller
    wakes a worker (``runtime.agent_channel.wake_dialog``). The owner's budget and the inbox
    capacity apply. Exactly-once is the caller's: create the run's own unique row in the same
    ``transaction.atomic()`` block as this call.

    Raises:
        NotFoundError: the dialog is unknown or deleted.
        InboxFullError, BudgetExceededError: as ``accept_message``.
    """
    dialog = Dialog.objects.filter(pk=dialog_id, deleted_at__isnull=True).select_related("owner").first()
    if dialog is None:
        raise NotFoundError(f"no dialog {shown_ref(dialog_id)}")
    return accept_message(
        dialog.owner, dialog.channel, dialog.chat_id, content, session_id=dialog.pk, source=source
    )


def running_inbox(channel: str, chat_id: str) -> list[dict]:
    """Started turns of a chat: ``[{turn_id, session_id, message_id}]`` (for ``ready.running``)."""
    rows = InboxMessage.objects.filter(
        dialog__channel=channel,
        dialog__chat_id=chat_id,
        dialog__deleted_at__isnull=True,
        status=InboxMessage.Status.STARTED,
    ).values_list("turn_id", "dialog_id", "reply_message_id")
    return [{"turn_id": str(t), "session_id": d, "message_id": str(r)} for t, d, r in rows if t is not None]


def dialogs_needing_work(worker_id: str, limit: int = 100) -> list[tuple[str, str | None, int | None]]:
    """Live dialogs with queued or orphaned started inbox rows whose lease is free, ours, or
    another worker's and lapsed: ``[(dialog_id, lease_owner, lease_expires_at)]``.

    Two reads of at most ``limit`` each — free or ours, and lapsed foreign ones — so a worker
    busy with many dialogs of its own still sees a dead worker's. A lapsed foreign lease is only
    a candidate: the caller claims it after seeing the same ``(owner, expires_at)`` again a
    renewal interval later (``claim_lease(takeover=…)``). A deleted dialog never runs again
    (``delete_dialog``).
    """
    with_work = InboxMessage.objects.filter(
        status__in=[InboxMessage.Status.QUEUED, InboxMessage.Status.STARTED], dialog__deleted_at__isnull=True
    )
    columns = ("dialog_id", "dialog__lease_owner", "dialog__lease_expires_at")
    free_or_ours = with_work.filter(Q(dialog__lease_owner__isnull=True) | Q(dialog__lease_owner=worker_id))
    lapsed = (
        with_work.filter(dialog__lease_expires_at__lt=now_ms())
        .exclude(dialog__lease_owner=worker_id)
        .exclude(dialog__lease_owner__isnull=True)
    )
    return [
        *free_or_ours.values_list(*columns).distinct()[:limit],
        *lapsed.values_list(*columns).distinct()[:limit],
    ]
