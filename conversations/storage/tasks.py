"""Background task rows (``BackgroundTask``; issue 18, seed 000 §9): start, heartbeat, end once.

Every end — completed, failed, cancelled, interrupted — is one conditional update ``WHERE
status='running' AND worker_id=<the owner>`` (and, for a takeover, the heartbeat it observed), so a
task ends exactly once whoever races to end it. A completed or failed task's notification is
accepted into its dialog's inbox in the same transaction as that update (``accept_automated``):
it exists if and only if the task ended that way, and queues behind a running turn.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction
from django.db.models import Q

from conversations.agent.automated_input import TASK_NOTIFICATION, automated_source
from conversations.agent.background_tasks import (
    TASK_ID_CHARS,
    TaskRequest,
    end_notice,
    notification_label,
    notification_text,
)
from conversations.models import BackgroundTask, Dialog, now_ms
from conversations.storage.inbox import accept_automated
from conversations.storage.shapes import (
    BudgetExceededError,
    InboxFullError,
    NotFoundError,
    refusal_text,
    scrub_text,
    shown_ref,
)
from conversations.usage.budget import check_budget

RUNNING = BackgroundTask.Status.RUNNING
DIALOG_DELETED_ERROR = "its dialog was deleted"
"""The error of a task cut short because (or after) its dialog was deleted."""
UNFINISHED = (BackgroundTask.Status.CANCELLED, BackgroundTask.Status.INTERRUPTED)
"""Ends of a task cut short: on a deleted dialog, their error is :data:`DIALOG_DELETED_ERROR`."""
NOTIFIED = frozenset({BackgroundTask.Status.COMPLETED, BackgroundTask.Status.FAILED})
"""Ends whose notification runs a turn of the dialog; the others only get a chat notice."""


class TaskLimitError(Exception):
    """The user already has ``max_running`` tasks running (the message says so)."""


@dataclass(frozen=True)
class StartedTask:
    """A task row just created: what its runner needs."""

    id: str
    dialog_id: str
    channel: str
    chat_id: str
    owner_id: int | None
    model: str
    prompt: str


@dataclass(frozen=True)
class EndedTask:
    """A task this call ended. ``inbox_id``: its notification's inbox row (completed / failed),
    None when it got none — ``refused`` then says why (the dialog's inbox is full, the budget is
    used up) unless the dialog is gone or the end needs no notification. ``notice_level`` and
    ``notice``: what the chat is told instead of a turn (``end_notice``; empty when nothing).
    ``error``: the error stored, when it differs from the one given (:data:`DIALOG_DELETED_ERROR`)."""

    id: str
    status: str
    dialog_id: str
    channel: str
    chat_id: str
    prompt: str
    inbox_id: str | None = None
    refused: str = ""
    notice_level: str = ""
    notice: str = ""
    error: str = ""


def new_task_id() -> str:
    """A fresh task id: ``TASK_ID_CHARS`` lower-case hex characters (short enough to type)."""
    return secrets.token_hex(TASK_ID_CHARS // 2)


def create_task(
    task_id: str,
    dialog_id: str,
    request: TaskRequest,
    *,
    worker_id: str,
    parent_turn_id: str = "",
    tool_call_id: str = "",
    max_running: int,
) -> StartedTask:
    """Create the running task ``task_id`` (:func:`new_task_id`) of the dialog, owned by
    ``worker_id`` (heartbeat now).

    Raises:
        NotFoundError: the dialog is unknown or deleted.
        TaskLimitError: the dialog's owner (an ownerless dialog: the dialog) already has
            ``max_running`` running tasks, or the owner's daily budget is used up (issue 17).
    """
    with transaction.atomic():
        dialog = Dialog.objects.select_for_update().filter(pk=dialog_id, deleted_at__isnull=True).first()
        if dialog is None:
            raise NotFoundError(f"no dialog {shown_ref(dialog_id)}")
        running = BackgroundTask.objects.filter(status=RUNNING)
        running = (
            running.filter(owner_id=dialog.owner_id) if dialog.owner_id else running.filter(dialog=dialog)
        )
        if running.count() >= max_running:
            raise TaskLimitError(
                f"at most {max_running} background tasks may run at once; wait for one to finish or stop "
                f"one (/tasks lists them)"
            )
        refused = check_budget(dialog.owner_id)
        if refused is not None:
            raise TaskLimitError(refused.message)
        stamp = now_ms()
        row = BackgroundTask.objects.create(
            id=task_id,
            dialog=dialog,
            owner_id=dialog.owner_id,
            parent_turn_id=parent_turn_id,
            tool_call_id=scrub_text(tool_call_id),
            prompt=scrub_text(request.prompt),
            tools=list(request.tools),
            limits=request.limits.as_dict(),
            worker_id=worker_id,
            heartbeat_at=stamp,
            started_at=stamp,
        )
    return StartedTask(
        row.id, dialog.id, dialog.channel, dialog.chat_id, dialog.owner_id, dialog.model, row.prompt
    )


def end_task(
    task_id: str,
    worker_id: str,
    status: str,
    *,
    result: str = "",
    error: str = "",
    iterations: int = 0,
    input_tokens: int = 0,
    output_tokens: int = 0,
    heartbeat_at: int | None = None,
) -> EndedTask | None:
    """End a running task owned by ``worker_id``; None when it is not running there any more
    (someone else ended it: nothing happens).

    ``heartbeat_at``: end it only if its heartbeat is still the one observed (a takeover of a
    dead process's task: a beat since then means it is alive). A ``completed`` or ``failed`` end
    puts the ``TaskNotification`` into the dialog's inbox in the same transaction; the caller
    wakes a worker for it (``agent_channel.wake_dialog``).
    """
    stamp = now_ms()
    with transaction.atomic():
        rows = BackgroundTask.objects.filter(pk=task_id, status=RUNNING, worker_id=worker_id)
        if heartbeat_at is not None:
            rows = rows.filter(heartbeat_at=heartbeat_at)
        changed = rows.update(
            status=status,
            result=scrub_text(result),
            error=scrub_text(error),
            finished_at=stamp,
            iterations=iterations,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
        if not changed:
            return None
        row = BackgroundTask.objects.select_related("dialog").get(pk=task_id)
        ended = EndedTask(row.id, status, row.dialog_id, row.dialog.channel, row.dialog.chat_id, row.prompt)
        if row.dialog.deleted_at is not None:  # nobody to tell: no notification, no notice
            if status in UNFINISHED:  # whoever or whatever stopped it, the delete did too
                BackgroundTask.objects.filter(pk=task_id).update(error=DIALOG_DELETED_ERROR)
                return replace(ended, error=DIALOG_DELETED_ERROR)
            return ended
        if status in NOTIFIED:
            ended = _queue_notification(row, ended)
        return _note(ended, stamp)


def _queue_notification(row: BackgroundTask, ended: EndedTask) -> EndedTask:
    """Accept the ``TaskNotification`` of a completed or failed task into its dialog's inbox."""
    status = ended.status
    content = notification_text(row.id, status, row.prompt, row.result, row.error)
    source = automated_source(
        TASK_NOTIFICATION, ref=row.id, label=notification_label(row.id, status), status=status
    )
    try:
        with transaction.atomic():
            accepted = accept_automated(row.dialog_id, content, source)
    except NotFoundError:
        return ended  # the dialog was deleted since (end_task checked it): nobody to tell
    except (InboxFullError, BudgetExceededError) as exc:
        return replace(ended, refused=refusal_text(exc))
    BackgroundTask.objects.filter(pk=row.id).update(notification_inbox_id=accepted.inbox_id)
    return replace(ended, inbox_id=str(accepted.inbox_id))


def _note(ended: EndedTask, stamp: int) -> EndedTask:
    """Keep the chat notice of an end without a turn on its row, pending until a client received
    it (``storage.notices``) — except a user's own stop, which that user is told at once."""
    if ended.inbox_id:
        return ended
    notice = end_notice(ended.id, ended.status, ended.prompt, ended.refused)
    if notice is None:
        return ended
    sent_at = stamp if ended.status == BackgroundTask.Status.CANCELLED else None
    BackgroundTask.objects.filter(pk=ended.id).update(
        notice_level=notice[0], notice=notice[1], notice_sent_at=sent_at
    )
    return replace(ended, notice_level=notice[0], notice=notice[1])


def beat_tasks(worker_id: str, task_ids: list[str]) -> dict[str, dict]:
    """Stamp the heartbeat of ``worker_id``'s running tasks ``task_ids``; returns, for each of
    them, ``{status, stop_requested, dialog_deleted}`` — a task that is no longer running there
    (ended by someone else) or that a user asked to stop (or whose dialog was deleted) is to be
    cancelled by its runner."""
    if not task_ids:
        return {}
    BackgroundTask.objects.filter(pk__in=task_ids, status=RUNNING, worker_id=worker_id).update(
        heartbeat_at=now_ms()
    )
    rows = BackgroundTask.objects.filter(pk__in=task_ids).values(
        "id", "status", "worker_id", "stop_requested_at", "dialog__deleted_at"
    )
    found = {
        row["id"]: {
            "status": row["status"] if row["worker_id"] == worker_id else "moved",
            "stop_requested": row["stop_requested_at"] is not None,
            "dialog_deleted": row["dialog__deleted_at"] is not None,
        }
        for row in rows
    }
    gone = {"status": "deleted", "stop_requested": False, "dialog_deleted": False}
    return {task_id: found.get(task_id, gone) for task_id in task_ids}


def running_task_owners(worker_id: str, stale_before_ms: int) -> list[tuple[str, str, int | None]]:
    """``(task id, owner, heartbeat_at)`` of running tasks that may be dead: those of
    ``worker_id`` itself (the caller knows which of them it runs) and those whose heartbeat is
    older than ``stale_before_ms``."""
    rows = BackgroundTask.objects.filter(status=RUNNING).filter(
        Q(worker_id=worker_id) | Q(heartbeat_at__lt=stale_before_ms) | Q(heartbeat_at__isnull=True)
    )
    return list(rows.values_list("id", "worker_id", "heartbeat_at"))


def request_task_stop(user: Any, task_id: str) -> dict:
    """Note that ``user`` asked to stop their task ``task_id``: ``{id, status, dialog_id,
    prompt, error, dialog_deleted}`` (the status before the request; only a running task is marked).

    Raises:
        NotFoundError: no such task of ``user`` (another user's task is not found either).
    """
    row = (
        BackgroundTask.objects.filter(pk=task_id.strip().lower(), owner=user)
        .values("id", "status", "dialog_id", "prompt", "error", "dialog__deleted_at")
        .first()
    )
    if row is None:
        raise NotFoundError(f"no task {shown_ref(task_id, 20)}")
    row["dialog_deleted"] = row.pop("dialog__deleted_at") is not None
    if row["status"] == RUNNING:
        BackgroundTask.objects.filter(pk=row["id"], status=RUNNING, stop_requested_at__isnull=True).update(
            stop_requested_at=now_ms()
        )
    return row


def user_tasks(user: Any, *, limit: int = 10) -> list[dict]:
    """``user``'s most recent tasks, newest first: ``{id, status, dialog_id, dialog_title,
    dialog_deleted, prompt, started_at, finished_at, error, result, iterations, input_tokens,
    output_tokens}`` (times in ms)."""
    rows = (
        BackgroundTask.objects.filter(owner=user)
        .order_by("-started_at")
        .values(
            "id",
            "status",
            "dialog_id",
            "dialog__title",
            "dialog__deleted_at",
            "prompt",
            "started_at",
            "finished_at",
            "error",
            "result",
            "iterations",
            "input_tokens",
            "output_tokens",
        )
    )
    return [
        {
            **{k: v for k, v in row.items() if not k.startswith("dialog__")},
            "dialog_title": row["dialog__title"],
            "dialog_deleted": row["dialog__deleted_at"] is not None,
        }
        for row in rows[:limit]
    ]
