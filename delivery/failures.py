"""Storage functions for ``DeliveryFailure`` rows (sync ORM; call through a storage runner).

The session records one row per turn whose terminal snapshot was not delivered (seed 000 §5);
operators resolve rows in the admin; each row is counted in the metrics. Imports only
``delivery.models`` and the metric definitions: delivery never depends on conversations.
"""

from __future__ import annotations

import time
import uuid

from django.db.models import QuerySet

from delivery.models import DeliveryFailure
from picobot_site.metrics import instruments

__all__ = ["MAX_ERROR_CHARS", "record_delivery_failure", "resolve_delivery_failures"]

#: Longer error texts are cut: the row is for operators, not a log.
MAX_ERROR_CHARS = 2000


def _now_ms() -> int:
    return int(time.time() * 1000)


def record_delivery_failure(
    *,
    channel: str,
    chat_id: str,
    dialog_id: str,
    turn_id: str | None,
    stage: str,
    error: str,
    attempts: int,
) -> DeliveryFailure:
    """Inserts one ``DeliveryFailure`` row (one DB write) and counts it in
    ``picobot_delivery_failures_total``.

    Args:
        channel: The target chat's platform.
        chat_id: The target chat.
        dialog_id: The dialog's unified id.
        turn_id: The turn's id (a UUID string), or None; a non-UUID id is stored as None.
        stage: One of ``DeliveryFailure.Stage`` (open, update, finish, fallback).
        error: What failed (no secrets; cut to ``MAX_ERROR_CHARS``).
        attempts: How many delivery attempts were made.

    Returns:
        The saved row.

    Raises:
        ValueError: ``stage`` is not a ``DeliveryFailure.Stage``.
        django.db.DatabaseError: The write failed.
    """
    if stage not in DeliveryFailure.Stage.values:
        raise ValueError(f"unknown delivery failure stage {stage!r}")
    try:
        turn_uuid = uuid.UUID(turn_id) if turn_id else None
    except ValueError:
        turn_uuid = None
    row = DeliveryFailure.objects.create(
        channel=channel,
        chat_id=chat_id,
        dialog_id=dialog_id,
        turn_id=turn_uuid,
        stage=stage,
        error=error[:MAX_ERROR_CHARS],
        attempts=attempts,
        created_at=_now_ms(),
    )
    instruments.record_delivery_failure(channel, stage)  # once the row exists (a retried write counts once)
    return row


def resolve_delivery_failures(rows: QuerySet[DeliveryFailure], *, now_ms: int | None = None) -> int:
    """Marks the unresolved rows among ``rows`` resolved now (one UPDATE).

    Returns:
        How many rows changed (already resolved ones keep their time).
    """
    return rows.filter(resolved_at__isnull=True).update(
        resolved_at=now_ms if now_ms is not None else _now_ms()
    )
