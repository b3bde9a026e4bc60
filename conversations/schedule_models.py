"""Rows of scheduled prompts (issue 18 "Scheduled prompts"); re-exported by ``conversations.models``.

Times are ms since the Unix epoch, as everywhere (``conversations.models``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from conversations.models import Dialog, InboxMessage, now_ms


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
    taken once, by whichever process creates this row (in the same transaction as the inbox row)."""

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

    class Meta:
        constraints = [models.UniqueConstraint(fields=["schedule", "slot_at"], name="schedule_slot_once")]

    def __str__(self) -> str:
        return f"schedule {self.schedule_id} slot {self.slot_at} ({self.status})"
