"""Durable notices: "your turn was interrupted" (DESIGN §3 InboxMessage), and what automation
did without a turn — a missed or refused scheduled run, an interrupted background task (issue 18).

When a worker takes over a dialog, ``turns.interrupt_started`` marks the rows a dead process left
``started`` as ``interrupted`` and the executor broadcasts a terminal ``failed`` snapshot and a
warning to the chat's group. That broadcast is best effort (DESIGN §2: ``group_send`` may drop, and
after a restart usually nobody is connected yet), so the row remembers whether its notice reached a
client: ``InboxMessage.notice_sent_at`` stays NULL until a connecting ``ChatConsumer`` sent it on
``ready``, or a connection that sent the group broadcast on to its client, called
:func:`mark_notices_sent` (``chat.ready_notices``). A notice seen twice — broadcast and resent
in the same moment — is shown once (clients dedupe ``notification`` frames by ``id``; the credit
window drops a second terminal snapshot).

Automation notices work the same way: the row (``ScheduleRun``, ``BackgroundTask``) keeps its
``notice`` with ``notice_sent_at`` NULL; the live broadcast and the ``ready`` resend carry the same
notification ``id`` (:func:`schedule_notice_id`, :func:`task_notice_id`).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q

from conversations.models import BackgroundTask, InboxMessage, ScheduleRun, now_ms

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


def schedule_notice_id(schedule_id: int, slot_at: int) -> str:
    """The ``notification`` id (and platform message key) of a scheduled slot's notice."""
    return f"schedule:{schedule_id}:{slot_at}"


def task_notice_id(task_id: str) -> str:
    """The ``notification`` id (and platform message key) of a background task's end notice."""
    return f"task:{task_id}"


def pending_automation_notices(channel: str, chat_id: str, limit: int = MAX_NOTICES) -> list[dict]:
    """Notices of scheduled runs and background tasks of the chat's live dialogs that no client
    has received yet, oldest first: ``{id, level, content, session_id, chat_id}`` — ``id`` the
    notification id, which :func:`mark_automation_notices_sent` takes."""
    return _unsent_automation_notices({"channel": channel, "chat_id": chat_id}, None, None, limit)


def unsent_platform_notices(
    channel: str, *, made_after: int, made_before: int, limit: int = MAX_NOTICES
) -> list[dict]:
    """Automation notices of an external platform's chats (all of ``channel``'s live dialogs)
    that the platform never confirmed, made within ``(made_after, made_before)`` (ms): what its
    recovery scan sends again (the live send failed, or its process died with it queued).

    Items as :func:`pending_automation_notices`'s, oldest first. A schedule run's notice is made
    with the row (``created_at``), a task's when it ended (``finished_at``).
    """
    return _unsent_automation_notices({"channel": channel}, made_after, made_before, limit)


def _unsent_automation_notices(
    dialog: dict, made_after: int | None, made_before: int | None, limit: int
) -> list[dict]:
    live = {f"dialog__{k}": v for k, v in dialog.items()} | {"dialog__deleted_at__isnull": True}
    pending = {"notice_sent_at__isnull": True}

    def made(field: str) -> dict:
        window = {}
        if made_after is not None:
            window[f"{field}__gt"] = made_after
        if made_before is not None:
            window[f"{field}__lt"] = made_before
        return window

    runs = (
        ScheduleRun.objects.filter(
            **{f"schedule__{k}": v for k, v in live.items()}, **pending, **made("created_at")
        )
        .exclude(notice_level="")
        .order_by("created_at", "pk")
        .values_list(
            "schedule_id",
            "slot_at",
            "schedule__dialog_id",
            "schedule__dialog__chat_id",
            "notice_level",
            "notice",
            "created_at",
        )
    )
    tasks = (
        BackgroundTask.objects.filter(**live, **pending, **made("finished_at"))
        .exclude(notice_level="")
        .order_by("finished_at", "pk")
        .values_list("pk", "dialog_id", "dialog__chat_id", "notice_level", "notice", "finished_at")
    )
    items = [
        (at, schedule_notice_id(schedule_id, slot_at), dialog_id, chat_id, level, notice)
        for schedule_id, slot_at, dialog_id, chat_id, level, notice, at in runs[:limit]
    ] + [
        (at or 0, task_notice_id(pk), dialog_id, chat_id, level, notice)
        for pk, dialog_id, chat_id, level, notice, at in tasks[:limit]
    ]
    items.sort(key=lambda item: item[0])
    return [
        {"id": notice_id, "level": level, "content": notice, "session_id": dialog_id, "chat_id": chat_id}
        for _, notice_id, dialog_id, chat_id, level, notice in items[:limit]
    ]


def mark_automation_notices_sent(notice_ids: Iterable[str]) -> int:
    """Record that these notices (notification ids: :func:`schedule_notice_id`,
    :func:`task_notice_id`) reached a client, or an external platform confirmed them (or refused
    them for good).

    Only rows with a notice not marked yet are touched; unknown ids are ignored; returns how many
    were marked.
    """
    runs, tasks = Q(pk__in=[]), []
    for notice_id in notice_ids:
        kind, _, key = str(notice_id).partition(":")
        if kind == "task":
            tasks.append(key)
        elif kind == "schedule":
            schedule_id, _, slot_at = key.partition(":")
            if schedule_id.isdigit() and slot_at.lstrip("-").isdigit():
                runs |= Q(schedule_id=int(schedule_id), slot_at=int(slot_at))
    stamp = now_ms()
    unsent = Q(notice_sent_at__isnull=True) & ~Q(notice_level="")
    marked = ScheduleRun.objects.filter(runs, unsent).update(notice_sent_at=stamp)
    if tasks:
        marked += BackgroundTask.objects.filter(unsent, pk__in=tasks).update(notice_sent_at=stamp)
    return marked
