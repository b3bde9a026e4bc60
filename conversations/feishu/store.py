"""The Feishu channel's transactions: idempotent receive, its pending work, the answers' state.

Synchronous ORM functions, each one short transaction; async callers go through
``storage.runner.run_storage``. The ``FeishuMessage`` row (``conversations.models``) is the
receive record (unique on app + message id, FEISHU.md §3) and carries the delivery state of the
answer to that message (its card, and whether the final went out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from conversations.agent.inbound import InboundMessage
from conversations.models import FeishuMessage, InboxMessage, Message, now_ms
from conversations.storage import AcceptedMessage, InboxFullError, accept_inbound

CLAIM_MS = 60_000
"""How long a process owns a ``received`` row or an undelivered final it works on."""


@dataclass(frozen=True)
class Recorded:
    """What recording one received message did.

    Attributes:
        row_id: The ``FeishuMessage`` row (the existing one for a duplicate).
        duplicate: The message was already recorded: nothing was done now.
        status: The row's status after this call.
        accepted: The inbox acceptance when the message went straight into its dialog's inbox.
    """

    row_id: int
    duplicate: bool
    status: str
    accepted: AcceptedMessage | None = None


def record_message(
    fields: dict[str, Any],
    *,
    ignore: str | None = None,
    inbound: InboundMessage | None = None,
) -> Recorded:
    """Records a received message once, and in the same transaction acts on it.

    Args:
        fields: The row's columns: ``app_id``, ``message_id``, ``event_id``, ``chat_id``,
            ``chat_type``, ``sender_open_id``, ``sent_at`` and ``event`` (the parsed event, for
            work done after the acknowledgement).
        ignore: Why the message is not answered (stored as ``note``, status ``ignored``), or None.
        inbound: The message for its dialog's inbox when it can go there at once (text without
            media); None leaves the row ``received`` for :func:`claim_received` (commands, images).

    Returns:
        :class:`Recorded`. A second call for the same app and message id — concurrent, after a
        restart or hours later — finds the unique constraint and returns ``duplicate=True``.
        A full inbox makes the row ``refused`` (nothing is retried).
    """
    with transaction.atomic():
        try:
            with transaction.atomic():
                row = FeishuMessage.objects.create(**fields)
        except IntegrityError:
            existing = FeishuMessage.objects.filter(
                app_id=fields["app_id"], message_id=fields["message_id"]
            ).values_list("pk", "status")
            pk, status = existing.first() or (0, "")
            return Recorded(pk, True, status)
        if ignore is not None:
            row.status, row.note = FeishuMessage.Status.IGNORED, ignore
            row.save(update_fields=["status", "note"])
            return Recorded(row.pk, False, row.status)
        if inbound is None:
            return Recorded(row.pk, False, row.status)
        return _accept(row, inbound)


def _accept(row: FeishuMessage, inbound: InboundMessage) -> Recorded:
    try:
        accepted = accept_inbound(None, inbound)
    except InboxFullError as exc:
        row.status, row.note = FeishuMessage.Status.REFUSED, str(exc)
        row.save(update_fields=["status", "note"])
        return Recorded(row.pk, False, row.status)
    row.status, row.inbox_id = FeishuMessage.Status.ACCEPTED, accepted.inbox_id
    row.save(update_fields=["status", "inbox"])
    return Recorded(row.pk, False, row.status, accepted)


def claim_received(row_id: int | None = None, *, older_than_ms: int = 0, limit: int = 20) -> list[dict]:
    """Claims ``received`` rows for this process for :data:`CLAIM_MS`: the one ``row_id``, or
    up to ``limit`` whose claim is free or lapsed and that arrived ``older_than_ms`` ago.

    Returns ``[{id, app_id, message_id, chat_id, chat_type, event}]`` of the rows claimed now
    (another process's live claim is skipped: each row is handled by one process at a time).
    """
    now = now_ms()
    free = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    rows = FeishuMessage.objects.filter(free, status=FeishuMessage.Status.RECEIVED)
    if row_id is not None:
        rows = rows.filter(pk=row_id)
    else:
        rows = rows.filter(received_at__lt=now - older_than_ms).order_by("received_at")[:limit]
    claimed = []
    for row in list(rows.values("id", "app_id", "message_id", "chat_id", "chat_type", "event")):
        won = FeishuMessage.objects.filter(free, pk=row["id"], status=FeishuMessage.Status.RECEIVED).update(
            claimed_until=now + CLAIM_MS
        )
        if won:
            claimed.append(row)
    return claimed


def accept_received(row_id: int, inbound: InboundMessage) -> Recorded:
    """Moves a claimed ``received`` row's message into its dialog's inbox (after its media were
    fetched). A row no longer ``received`` (handled meanwhile) is left as it is (duplicate)."""
    with transaction.atomic():
        row = FeishuMessage.objects.select_for_update().filter(pk=row_id).first()
        if row is None or row.status != FeishuMessage.Status.RECEIVED:
            return Recorded(row_id, True, row.status if row else "")
        return _accept(row, inbound)


def finish_received(row_id: int, status: str, note: str = "") -> None:
    """Marks a claimed ``received`` row ``answered`` (a command) or ``ignored`` (with ``note``)."""
    FeishuMessage.objects.filter(pk=row_id).update(status=status, note=note, claimed_until=None)


def save_card_state(inbox_id: str, state: dict, *, delivered: bool) -> None:
    """Saves the answer's card state; ``delivered`` stamps ``final_delivered_at`` (once)."""
    FeishuMessage.objects.filter(inbox_id=inbox_id).update(card=state)
    if delivered:
        FeishuMessage.objects.filter(inbox_id=inbox_id, final_delivered_at__isnull=True).update(
            final_delivered_at=now_ms(), claimed_until=None
        )


def reply_target(inbox_id: str) -> dict | None:
    """``{message_id, chat_id, chat_type, card}`` of the Feishu message behind inbox row
    ``inbox_id``, or None when the inbox row did not come from Feishu."""
    return (
        FeishuMessage.objects.filter(inbox_id=inbox_id)
        .values("message_id", "chat_id", "chat_type", "card")
        .first()
    )


def turn_target(turn_id: str) -> dict | None:
    """:func:`reply_target` for the turn ``turn_id`` (its inbox row's), plus ``inbox_id``."""
    row = (
        FeishuMessage.objects.filter(inbox__turn_id=turn_id)
        .values("message_id", "chat_id", "chat_type", "card", "inbox_id")
        .first()
    )
    if row is not None:
        row["inbox_id"] = str(row["inbox_id"])
    return row


def claim_undelivered_finals(*, settled_ms: int, max_age_ms: int, limit: int = 20) -> list[dict]:
    """Claims answers whose turn ended at least ``settled_ms`` ago but whose final the platform
    never confirmed (the process died between the commit and the confirmation, or every attempt
    failed), for at most ``max_age_ms`` after the turn ended (see :func:`give_up_finals`).

    Returns ``[{inbox_id, turn_id, message_id, chat_id, card, outcome, error, answer}]``:
    ``answer`` is the turn's committed answer text (its assistant rows' texts, in order, joined by
    a blank line as ``TurnSnapshot.answer_text`` joins them).
    """
    now = now_ms()
    free = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    rows = (
        FeishuMessage.objects.filter(
            free,
            status=FeishuMessage.Status.ACCEPTED,
            final_delivered_at__isnull=True,
            inbox__status__in=[InboxMessage.Status.DONE, InboxMessage.Status.INTERRUPTED],
            inbox__finished_at__lt=now - settled_ms,
            inbox__finished_at__gt=now - max_age_ms,
        )
        .order_by("received_at")
        .values(
            "id",
            "inbox_id",
            "message_id",
            "chat_id",
            "card",
            "inbox__turn_id",
            "inbox__outcome",
            "inbox__error",
            "inbox__status",
        )[:limit]
    )
    claimed = []
    for row in list(rows):
        if not FeishuMessage.objects.filter(free, pk=row["id"]).update(claimed_until=now + CLAIM_MS):
            continue
        turn_id = row["inbox__turn_id"]
        answer = "\n\n".join(
            text
            for text in Message.objects.filter(turn_id=turn_id, role=Message.Role.ASSISTANT)
            .order_by("seq")
            .values_list("content", flat=True)
            if text
        )
        claimed.append(
            {
                "inbox_id": str(row["inbox_id"]),
                "turn_id": str(turn_id) if turn_id else "",
                "message_id": row["message_id"],
                "chat_id": row["chat_id"],
                "card": row["card"],
                "outcome": row["inbox__outcome"]
                or ("failed" if row["inbox__status"] == InboxMessage.Status.INTERRUPTED else ""),
                "error": row["inbox__error"],
                "answer": answer,
            }
        )
    return claimed


GAVE_UP = 2**62
"""``claimed_until`` of an answer whose final is not tried again (never claimable)."""


def give_up_final(inbox_id: str, reason: str) -> None:
    """Stops retrying the final of the answer to inbox row ``inbox_id`` (the chat refuses it) and
    records a ``DeliveryFailure`` for the operator."""
    _give_up(FeishuMessage.objects.filter(inbox_id=inbox_id, final_delivered_at__isnull=True), reason)


def give_up_finals(*, max_age_ms: int) -> int:
    """Gives up the finals not confirmed within ``max_age_ms`` after their turn ended: the
    platform's uuid de-duplication lasts one hour (FEISHU.md §7), so a later resend could show a
    second answer. Each gets a ``DeliveryFailure``; returns how many."""
    rows = FeishuMessage.objects.filter(
        status=FeishuMessage.Status.ACCEPTED,
        final_delivered_at__isnull=True,
        inbox__status__in=[InboxMessage.Status.DONE, InboxMessage.Status.INTERRUPTED],
        inbox__finished_at__lte=now_ms() - max_age_ms,
    ).exclude(claimed_until=GAVE_UP)
    minutes = max_age_ms // 60_000
    return _give_up(rows, f"the final was not confirmed within {minutes} min after the turn ended")


def _give_up(rows: Any, reason: str) -> int:
    """Marks ``rows`` given up; each gets a ``DeliveryFailure`` unless its turn has an open one."""
    from delivery.failures import record_delivery_failure
    from delivery.models import DeliveryFailure

    count = 0
    for row in rows.select_related("inbox"):
        with transaction.atomic():
            if (
                not FeishuMessage.objects.filter(pk=row.pk)
                .exclude(claimed_until=GAVE_UP)
                .update(claimed_until=GAVE_UP, note=reason[:500])
            ):
                continue
            turn_id = row.inbox.turn_id if row.inbox else None
            if turn_id and DeliveryFailure.objects.filter(turn_id=turn_id, resolved_at__isnull=True).exists():
                continue
            record_delivery_failure(
                channel="feishu",
                chat_id=row.chat_id,
                dialog_id=row.inbox.dialog_id if row.inbox else "",
                turn_id=str(turn_id) if turn_id else None,
                stage="finish",
                error=reason,
                attempts=0,
            )
            count += 1
    return count


def resolve_delivered_failures(*, since_ms: int) -> int:
    """Marks resolved the open ``DeliveryFailure`` rows of Feishu turns whose final the platform
    confirmed after all (a retry, the fallback or the recovery scan delivered it), for messages
    received in the last ``since_ms``; returns how many (one UPDATE)."""
    from delivery.failures import resolve_delivery_failures
    from delivery.models import DeliveryFailure

    delivered_turns = FeishuMessage.objects.filter(
        final_delivered_at__isnull=False, received_at__gt=now_ms() - since_ms, inbox__turn_id__isnull=False
    ).values("inbox__turn_id")
    return resolve_delivery_failures(
        DeliveryFailure.objects.filter(channel="feishu", turn_id__in=delivered_turns)
    )
