"""Sums of usage rows: per dialog (``/info``, the dialog API) and grouped (``GET /api/usage``).

Every sum has the public shape of issue 17: ``{calls, input_tokens, output_tokens, cached_tokens,
cost}`` (``cost`` a float in the presets' currency; input tokens include the cached ones). One
query per call of these functions; they touch the DB (run them through ``run_storage``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from decimal import Decimal
from typing import Any

from django.db.models import Count, QuerySet, Sum

from conversations.models import UsageRecord

GROUPS = {"dialog": "dialog_id", "user": "username", "day": "day"}
"""``group_by`` → the row field it groups on (issue 17 "Public surface")."""

_SUMS = {
    "calls": Count("id"),
    "input_tokens": Sum("input_tokens"),
    "output_tokens": Sum("output_tokens"),
    "cached_tokens": Sum("cached_tokens"),
    "cost": Sum("cost"),
}


def empty_usage() -> dict[str, Any]:
    """The sums of no rows."""
    return {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "cost": 0.0}


def _shaped(values: dict[str, Any]) -> dict[str, Any]:
    return {
        "calls": values["calls"] or 0,
        "input_tokens": values["input_tokens"] or 0,
        "output_tokens": values["output_tokens"] or 0,
        "cached_tokens": values["cached_tokens"] or 0,
        # To the column's 12 places: SQLite sums decimals as floats (0.0818400000000001).
        "cost": round(float(values["cost"] or Decimal(0)), 12),
    }


def dialog_usage(dialog_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{dialog id: sums}`` for the dialogs that have rows (one grouped query)."""
    ids = list(dialog_ids)
    if not ids:
        return {}
    grouped = UsageRecord.objects.filter(dialog_id__in=ids).values("dialog_id").annotate(**_SUMS)
    return {row["dialog_id"]: _shaped(row) for row in grouped}


def usage_rows(
    *, user_id: int | None, since: date | None = None, until: date | None = None
) -> QuerySet[UsageRecord]:
    """The rows a caller may sum: one user's (``user_id``) or everyone's (None), within the UTC
    days ``since``..``until`` (both included; None = open)."""
    rows = UsageRecord.objects.all()
    if user_id is not None:
        rows = rows.filter(user_id=user_id)
    if since is not None:
        rows = rows.filter(day__gte=since)
    if until is not None:
        rows = rows.filter(day__lte=until)
    return rows


def grouped_usage(rows: QuerySet[UsageRecord], group_by: str) -> list[dict[str, Any]]:
    """``[{key, calls, input_tokens, output_tokens, cached_tokens, cost}]`` of ``rows`` grouped by
    dialog id, username or day (``YYYY-MM-DD``), ordered by key (days: oldest first).

    Raises:
        ValueError: ``group_by`` is not ``dialog``, ``user`` or ``day``.
    """
    field = GROUPS.get(group_by)
    if field is None:
        raise ValueError(f"group_by must be one of {', '.join(GROUPS)}, got {group_by!r}")
    grouped = rows.values(field).annotate(**_SUMS).order_by(field)
    return [{"key": _key(row[field]), **_shaped(row)} for row in grouped]


def total_usage(rows: QuerySet[UsageRecord]) -> dict[str, Any]:
    """The sums of ``rows`` (one query)."""
    return _shaped(rows.aggregate(**_SUMS))


def _key(value: Any) -> str:
    return value.isoformat() if isinstance(value, date) else str(value)
