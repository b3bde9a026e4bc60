"""Scheduled prompts: create, list, pause, delete, and fire due slots exactly once (issue 18).

Who may see a schedule: its ``owner`` (a WebUI/TUI/REST user) from any dialog; for chats
without Django users (Feishu) the schedules of that chat. Firing a slot creates its
``ScheduleRun`` row and its inbox row in one transaction, so across processes and restarts a
slot enters the inbox at most once (``schedule_slot_once``), and a committed slot never again.

Items (``schedule_item``): ``{id, session_id, cron, tz, prompt, enabled, next_run_at,
created_at, last_run_at, last_status, last_detail, dialog_title}``; times in ms, ``next_run_at``
null while paused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q

from conversations.agent.automated_input import SCHEDULE, automated_source
from conversations.agent.schedule_timing import (
    ScheduleSpecError,
    clean_prompt,
    parse_spec,
    parse_zone,
    plan_due,
    slot_notice,
    slot_text,
)
from conversations.models import Dialog, Schedule, ScheduleRun, now_ms
from conversations.storage.inbox import accept_automated
from conversations.storage.shapes import (
    BudgetExceededError,
    InboxFullError,
    NotFoundError,
    refusal_text,
    scrub_text,
)

log = logging.getLogger(__name__)

Status = ScheduleRun.Status


class ScheduleLimitError(Exception):
    """The user (the chat) already has ``PICOBOT_SCHEDULES_PER_USER`` schedules."""


def schedule_item(row: Schedule) -> dict:
    """A schedule as clients see it (the module docstring's shape)."""
    return {
        "id": row.pk,
        "session_id": row.dialog_id,
        "cron": row.cron,
        "tz": row.tz,
        "prompt": row.prompt,
        "enabled": row.enabled,
        "next_run_at": row.next_run_at,
        "created_at": row.created_at,
        "last_run_at": row.last_run_at,
        "last_status": row.last_status,
        "last_detail": row.last_detail,
        "dialog_title": row.dialog.title,
    }


def _scope(owner: Any, channel: str = "", chat_id: str = "") -> Q:
    if owner is not None:
        return Q(owner=owner)
    return Q(owner__isnull=True, dialog__channel=channel, dialog__chat_id=chat_id)


def checked_fields(cron: str, tz: str | None, prompt: str) -> tuple[str, str, str]:
    """``(cron, tz, prompt)`` as stored; a blank ``tz`` is ``PICOBOT_TIME_ZONE``.

    Raises:
        ScheduleSpecError: a field is invalid (``.field`` names it).
    """
    spec = parse_spec(cron)
    zone = parse_zone(tz or settings.PICOBOT.time_zone)
    return spec.text, zone.key, clean_prompt(prompt)


def first_slot(cron: str, tz: str, after_ms: int) -> int:
    """The first slot of a valid ``cron``/``tz`` after ``after_ms`` (an interval anchored there)."""
    return parse_spec(cron).next_after(after_ms, parse_zone(tz), after_ms)


def create_schedule(
    dialog: Dialog, cron: str, prompt: str, tz: str | None = None, *, enabled: bool = True
) -> dict:
    """A new schedule of ``dialog`` (which the caller checked is the user's / the chat's).

    Raises:
        ScheduleSpecError: a bad ``cron``, ``tz`` or ``prompt``.
        ScheduleLimitError: the owner (chat) has ``PICOBOT_SCHEDULES_PER_USER`` schedules.
    """
    cron, tz, prompt = checked_fields(cron, tz, scrub_text(prompt))
    limit = settings.PICOBOT.schedules_per_user
    now = now_ms()
    with transaction.atomic():
        _lock_scope(dialog)  # two creates at once must not both pass the count (PostgreSQL)
        mine = Schedule.objects.filter(_scope(dialog.owner, dialog.channel, dialog.chat_id))
        if mine.filter(dialog__deleted_at__isnull=True).count() >= limit:  # a deleted dialog's do not run
            raise ScheduleLimitError(
                f"you already have {limit} scheduled prompts (the limit); delete one first"
            )
        row = Schedule.objects.create(
            dialog=dialog,
            owner=dialog.owner,
            cron=cron,
            tz=tz,
            prompt=prompt,
            enabled=enabled,
            anchor_at=now,
            next_run_at=first_slot(cron, tz, now) if enabled else None,
            created_at=now,
            updated_at=now,
        )
    return schedule_item(row)


def _lock_scope(dialog: Dialog) -> None:
    """Row-lock what the schedule limit counts over, until the caller's transaction ends: the
    owner's user row, or (an ownerless chat) the chat's dialogs. SQLite serialises writers anyway."""
    if dialog.owner_id is not None:
        rows = get_user_model().objects.filter(pk=dialog.owner_id)
    else:
        rows = Dialog.objects.filter(channel=dialog.channel, chat_id=dialog.chat_id)
    list(rows.select_for_update().values_list("pk", flat=True))


def schedules_of(
    owner: Any, channel: str = "", chat_id: str = "", *, dialog_id: str | None = None
) -> list[dict]:
    """The user's (the chat's) schedules of live dialogs, oldest first; only ``dialog_id``'s if given."""
    rows = Schedule.objects.filter(_scope(owner, channel, chat_id), dialog__deleted_at__isnull=True)
    if dialog_id is not None:
        rows = rows.filter(dialog_id=dialog_id)
    return [schedule_item(row) for row in rows.select_related("dialog").order_by("pk")]


def _own(owner: Any, channel: str, chat_id: str, schedule_id: Any) -> Schedule:
    try:
        pk = int(str(schedule_id).lstrip("#"))
    except ValueError:
        pk = None
    mine = Schedule.objects.filter(_scope(owner, channel, chat_id), dialog__deleted_at__isnull=True)
    row = mine.filter(pk=pk).first() if pk else None
    if row is None:
        raise NotFoundError(f"no such schedule {str(schedule_id)[:40]!r}")
    return row


def delete_schedule(owner: Any, schedule_id: Any, channel: str = "", chat_id: str = "") -> dict:
    """Delete one of the user's (the chat's) schedules, from any dialog; its run rows go with it.

    Raises:
        NotFoundError: no such schedule, or another user's (chat's).
    """
    with transaction.atomic():
        row = _own(owner, channel, chat_id, schedule_id)
        item = schedule_item(row)
        row.delete()
    return item


def set_schedule_enabled(
    owner: Any, schedule_id: Any, enabled: bool, channel: str = "", chat_id: str = ""
) -> dict:
    """Pause or resume a schedule. Resuming counts from now: slots of the pause are not missed runs.

    Raises:
        NotFoundError: no such schedule, or another user's (chat's).
    """
    return update_schedule(owner, schedule_id, channel, chat_id, enabled=enabled)


def update_schedule(
    owner: Any,
    schedule_id: Any,
    channel: str = "",
    chat_id: str = "",
    *,
    cron: str | None = None,
    tz: str | None = None,
    prompt: str | None = None,
    enabled: bool | None = None,
) -> dict:
    """Change the given fields of a schedule (None: unchanged). A new ``cron`` or ``tz``, or a
    resume, counts from now: the next due time is the first one after now, and the times between
    are not missed runs. ``tz=""`` means ``PICOBOT_TIME_ZONE``.

    Raises:
        NotFoundError: no such schedule, or another user's (chat's).
        ScheduleSpecError: a bad ``cron``, ``tz`` or ``prompt`` (``.field`` names it).
    """
    with transaction.atomic():
        row = _own(owner, channel, chat_id, schedule_id)
        new_cron, new_tz, new_prompt = checked_fields(
            row.cron if cron is None else cron,
            row.tz if tz is None else tz,
            row.prompt if prompt is None else scrub_text(prompt),
        )
        new_enabled = row.enabled if enabled is None else enabled
        retimed = (new_cron, new_tz) != (row.cron, row.tz) or (new_enabled and not row.enabled)
        if (new_cron, new_tz, new_prompt, new_enabled) == (row.cron, row.tz, row.prompt, row.enabled):
            return schedule_item(row)
        now = now_ms()
        row.cron, row.tz, row.prompt, row.enabled, row.updated_at = (
            new_cron,
            new_tz,
            new_prompt,
            new_enabled,
            now,
        )
        if retimed:
            row.anchor_at = now
        if not new_enabled:
            row.next_run_at = None
        elif retimed:
            row.next_run_at = first_slot(new_cron, new_tz, now)
        row.save(update_fields=["cron", "tz", "prompt", "enabled", "updated_at", "anchor_at", "next_run_at"])
    return schedule_item(row)


# --- firing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FiredSlot:
    """One schedule's due slot as this process handled it: what to wake and what to tell.

    ``status``: ``queued`` (the prompt is in the inbox: wake the dialog), ``skipped`` (missed,
    policy ``skip``) or ``refused`` (``detail`` says why). ``missed``: found after the grace.
    ``skipped_count``: earlier slots skipped with it. ``notice_level``/``notice``: what the chat is
    told (empty for an ordinary run; kept on the run row until a client received it).
    """

    schedule_id: int
    dialog_id: str
    channel: str
    chat_id: str
    cron: str
    tz: str
    slot_at: int
    status: str
    missed: bool
    skipped_count: int
    detail: str = ""
    notice_level: str = ""
    notice: str = ""


def fire_due_schedules(
    worker_id: str, now: int, grace_ms: int, policy: str, *, limit: int = 50
) -> list[FiredSlot]:
    """Handle up to ``limit`` due schedules (``next_run_at <= now``), each in its own transaction.

    A slot another process took (or is taking) is left to it. Returns what this call handled.
    """
    due = (
        Schedule.objects.filter(enabled=True, next_run_at__lte=now)
        .order_by("next_run_at")
        .values_list("pk", flat=True)[:limit]
    )
    fired = []
    for pk in list(due):
        try:
            slot = _fire(pk, worker_id, now, grace_ms, policy)
        except IntegrityError:
            slot = None  # another process created this slot's run row first
        if slot is not None:
            fired.append(slot)
    return fired


def _fire(pk: int, worker_id: str, now: int, grace_ms: int, policy: str) -> FiredSlot | None:
    with transaction.atomic():
        row = (
            Schedule.objects.select_for_update(skip_locked=True)
            .filter(pk=pk, enabled=True, next_run_at__lte=now)
            .first()
        )
        if row is None:
            return None  # taken, paused or deleted meanwhile
        dialog = Dialog.objects.filter(pk=row.dialog_id).only("channel", "chat_id", "deleted_at").first()
        try:
            spec, zone = parse_spec(row.cron), parse_zone(row.tz)
        except ScheduleSpecError as exc:  # e.g. a zone a tzdata update removed
            return _disable(row, dialog, worker_id, now, f"cannot compute its times: {exc}")
        plan = plan_due(
            spec,
            zone,
            next_run_at=row.next_run_at,
            anchor_ms=row.anchor_at,
            now_ms=now,
            grace_ms=grace_ms,
            policy=policy,  # type: ignore[arg-type]
        )
        if plan is None:
            return None
        run = ScheduleRun.objects.create(
            schedule=row, slot_at=plan.slot_at, status=Status.SKIPPED, missed=plan.missed, worker=worker_id
        )
        ScheduleRun.objects.bulk_create(
            [
                ScheduleRun(
                    schedule=row,
                    slot_at=slot,
                    status=Status.SKIPPED,
                    missed=True,
                    detail=MISSED_DETAIL,
                    worker=worker_id,
                )
                for slot in plan.skipped
            ],
            ignore_conflicts=True,
        )
        if plan.run:
            _queue(row, run)
        else:
            run.detail = MISSED_DETAIL
        _note(run, row.tz, plan.skipped_count)
        run.save(update_fields=["status", "detail", "inbox", "notice_level", "notice"])
        row.next_run_at = plan.next_run_at
        row.last_run_at, row.last_status, row.last_detail = plan.slot_at, run.status, run.detail
        if run.detail == DIALOG_GONE:
            row.enabled, row.next_run_at = False, None
        row.save(update_fields=["next_run_at", "last_run_at", "last_status", "last_detail", "enabled"])
    return _fired(row, dialog, run, plan.skipped_count)


def _note(run: ScheduleRun, tz: str, skipped_count: int) -> None:
    """Set ``run``'s chat notice (``slot_notice``) from its status."""
    notice = slot_notice(
        run.schedule_id,
        run.slot_at,
        tz,
        run.status,
        missed=run.missed,
        skipped_count=skipped_count,
        detail=run.detail,
    )
    run.notice_level, run.notice = notice or ("", "")


def _fired(row: Schedule, dialog: Dialog | None, run: ScheduleRun, skipped_count: int = 0) -> FiredSlot:
    channel, chat_id = (dialog.channel, dialog.chat_id) if dialog else ("", "")
    return FiredSlot(
        row.pk,
        row.dialog_id,
        channel,
        chat_id,
        row.cron,
        row.tz,
        run.slot_at,
        run.status,
        run.missed,
        skipped_count,
        run.detail,
        run.notice_level,
        run.notice,
    )


DIALOG_GONE = "its dialog was deleted"
MISSED_DETAIL = "missed while the server was down"


def prune_schedule_runs(older_than_ms: int) -> int:
    """Delete the run rows of slots before ``older_than_ms``; returns how many went. A slot that
    old is never fired again (``next_run_at`` is past it), so its row no longer guards anything."""
    deleted, _ = ScheduleRun.objects.filter(slot_at__lt=older_than_ms).delete()
    return deleted


def _queue(row: Schedule, run: ScheduleRun) -> None:
    """Put the slot's prompt in the dialog's inbox (in the caller's transaction) and note on ``run``."""
    label = f"Scheduled ({row.cron}): {row.prompt}"
    if run.missed:  # history says so too: a notice reaches only the sockets open at that moment
        label = f"Scheduled ({row.cron}), late: due {slot_text(run.slot_at, row.tz)} while the server was down: {row.prompt}"
    source = automated_source(SCHEDULE, ref=str(row.pk), label=label, slot_at=run.slot_at)
    try:
        with transaction.atomic():  # a savepoint: a refusal keeps the run row
            accepted = accept_automated(row.dialog_id, row.prompt, source)
    except NotFoundError:
        run.status, run.detail = Status.REFUSED, DIALOG_GONE
        return
    except (InboxFullError, BudgetExceededError) as exc:
        run.status, run.detail = Status.REFUSED, refusal_text(exc)[:300]
        return
    run.status, run.inbox_id = Status.QUEUED, accepted.inbox_id


def _disable(row: Schedule, dialog: Dialog | None, worker_id: str, now: int, reason: str) -> FiredSlot:
    slot = row.next_run_at or now
    log.warning("schedule %s disabled: %s", row.pk, reason)
    run = ScheduleRun(
        schedule=row, slot_at=slot, status=Status.REFUSED, detail=reason[:300], worker=worker_id
    )
    _note(run, row.tz, 0)
    run, _ = ScheduleRun.objects.get_or_create(
        schedule=row,
        slot_at=slot,
        defaults={f: getattr(run, f) for f in ("status", "detail", "worker", "notice_level", "notice")},
    )
    row.enabled, row.next_run_at = False, None
    row.last_run_at, row.last_status, row.last_detail = slot, Status.REFUSED, reason[:300]
    row.save(update_fields=["enabled", "next_run_at", "last_run_at", "last_status", "last_detail"])
    return _fired(row, dialog, run)
