"""Delivery bookkeeping rows (DESIGN §3): a turn whose final snapshot could not be delivered."""

from __future__ import annotations

from django.db import models


class DeliveryFailure(models.Model):
    """A sink failed to deliver a turn's final state; one plain fallback was sent (seed 000 §5).

    ``dialog_id`` is the dialog's unified id as text (no foreign key: delivery does not depend on
    conversations). Times are milliseconds since the Unix epoch.
    """

    class Stage(models.TextChoices):
        OPEN = "open"
        UPDATE = "update"
        FINISH = "finish"
        FALLBACK = "fallback"

    channel = models.CharField(max_length=32)
    chat_id = models.CharField(max_length=128)
    dialog_id = models.CharField(max_length=255, db_index=True)
    turn_id = models.UUIDField(null=True, blank=True)
    stage = models.CharField(max_length=16, choices=Stage.choices)
    error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.BigIntegerField(help_text="ms since epoch")
    resolved_at = models.BigIntegerField(null=True, blank=True, help_text="ms since epoch")

    class Meta:
        indexes = [models.Index(fields=["channel", "chat_id"])]

    def __str__(self) -> str:
        return f"{self.channel}:{self.chat_id} turn {self.turn_id} ({self.stage})"
