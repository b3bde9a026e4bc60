"""Automated input's rows: scheduled prompts and background tasks (issue 18); re-exported by
``conversations.models``.

Times are ms since the Unix epoch, as everywhere (``conversations.models``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from conversations.models import Dialog, InboxMessage, now_ms


def pending_notice_index(table: str) -> models.Index:
    """A partial index of the rows whose notice waits for a client: few, read on every ``ready``."""
    return models.Index(
        fields=["notice_sent_at"],
        condition=models.Q(notice_sent_at__isnull=True) & ~models.Q(notice_level=""),
        name=f"{table}_pending_notice",
    )


class Schedule(models.Model):
    """A prompt that enters ``dialog``'s inbox at the times ``cron`` names, read in ``tz``.

    ``cron``: a 5-field cron expression, an alias (``@daily``) or ``@every 30m``
    (``agent.schedule_timing``). ``owner`` is the dialog's (None for Feishu chats). ``anchor_at``
    counts intervals (creation or the last resume). ``next_run_at`` is the next slot (None while
    disabled). ``last_*`` repeat the latest run row for lists.
    """

    dialog = models.ForeignKey(Dialog, on_delete=models.CASCADE, related_name="schedules")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="schedules"
    )
    cron = models.CharField(max_length=100)
    tz = models.CharField(max_length=64)
    prompt = models.TextField()
    enabled = models.BooleanField(default=True)
    anchor_at = models.BigIntegerField(default=now_ms)
    next_run_at = models.BigIntegerField(null=True, blank=True)
    created_at = models.BigIntegerField(default=now_ms)
    updated_at = models.BigIntegerField(default=now_ms)
    last_run_at = models.BigIntegerField(null=True, blank=True)
    last_status = models.CharField(max_length=16, blank=True, default="")
    last_detail = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["enabled", "next_run_at"])]

    def __str__(self) -> str:
        return f"schedule {self.pk} ({self.cron})"


class ScheduleRun(models.Model):
    """What happened to one slot of a schedule; unique per ``(schedule, slot_at)``: a slot is
    taken once, by whichever process creates this row (in the same transaction as the inbox row).

    ``notice``/``notice_level``: what the chat is told about it (a missed or refused run; empty
    for an ordinary one); ``notice_sent_at`` stays NULL until a client received it
    (``storage.notices``).
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        SKIPPED = "skipped"
        REFUSED = "refused"

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    slot_at = models.BigIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices)
    missed = models.BooleanField(default=False)
    detail = models.CharField(max_length=300, blank=True, default="")
    inbox = models.ForeignKey(
        InboxMessage, null=True, blank=True, on_delete=models.SET_NULL, related_name="schedule_runs"
    )
    worker = models.CharField(max_length=200, blank=True, default="")
    created_at = models.BigIntegerField(default=now_ms)
    notice_level = models.CharField(max_length=8, blank=True, default="")
    notice = models.TextField(blank=True, default="")
    notice_sent_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["schedule", "slot_at"], name="schedule_slot_once")]
        indexes = [models.Index(fields=["slot_at"], name="schedule_run_slot_at"), pending_notice_index("run")]

    def __str__(self) -> str:
        return f"schedule {self.schedule_id} slot {self.slot_at} ({self.status})"


class BackgroundTask(models.Model):
    """A sub-agent started by the ``spawn_task`` tool (seed 000 §9; issue 18 "Background tasks").

    It runs in one worker process (``worker_id``), which stamps ``heartbeat_at`` (ms) while it runs;
    a running row whose heartbeat lapsed belongs to a dead process and ends ``interrupted``
    (``runtime.background_tasks``). Every end is one conditional update from ``running``, so it
    happens once. A completed or failed task's ``TaskNotification`` is the inbox row
    ``notification_inbox_id`` of its dialog. ``limits`` is ``{max_seconds, max_iterations,
    max_tokens}``; ``tools`` the names the sub-agent may call. ``notice``/``notice_level``: what
    the chat is told about an end without a turn (cancelled, interrupted, a refused notification);
    ``notice_sent_at`` stays NULL until a client received it (``storage.notices``). Times are ms
    since the epoch.
    """

    class Status(models.TextChoices):
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"
        INTERRUPTED = "interrupted"

    id = models.CharField(primary_key=True, max_length=16)
    dialog = models.ForeignKey(Dialog, on_delete=models.CASCADE, related_name="tasks")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE)
    parent_turn_id = models.CharField(max_length=64, blank=True, default="")
    tool_call_id = models.TextField(blank=True, default="")
    prompt = models.TextField()
    tools = models.JSONField(default=list, blank=True)
    limits = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    result = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    worker_id = models.CharField(max_length=200, blank=True, default="")
    heartbeat_at = models.BigIntegerField(null=True, blank=True)
    stop_requested_at = models.BigIntegerField(null=True, blank=True)
    started_at = models.BigIntegerField(default=now_ms)
    finished_at = models.BigIntegerField(null=True, blank=True)
    iterations = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    notification_inbox_id = models.UUIDField(null=True, blank=True)
    notice_level = models.CharField(max_length=8, blank=True, default="")
    notice = models.TextField(blank=True, default="")
    notice_sent_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["status", "worker_id"]),
            models.Index(fields=["owner", "started_at"]),
            pending_notice_index("task"),
        ]

    def __str__(self) -> str:
        return f"task {self.id} ({self.status})"
