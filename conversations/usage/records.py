"""Provider calls become ``UsageRecord`` rows: :func:`record_calls` (a storage function).

One row per call (issue 17 "Usage and cost"): tokens and cost through ``accounting.account``, the
scope's dialog, turn, user and channel — a scope without a user or channel (a title, a ``/compact``)
takes them from its dialog's row —, the user's name as it is at write time (kept when the user is
deleted later), the UTC day of the call's start. Runs on a storage thread (``run_storage``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime

from django.contrib.auth import get_user_model
from django.db import DatabaseError, InterfaceError, OperationalError, transaction

from conversations.models import Dialog, UsageRecord
from conversations.usage.accounting import account
from providers.metering import ProviderCall
from providers.presets import ModelPreset

log = logging.getLogger(__name__)


def _cut(value: str, field: str) -> str:
    return value[: UsageRecord._meta.get_field(field).max_length]


def _presets() -> dict[str, ModelPreset]:
    from conversations.runtime.provider import model_catalog

    try:
        return dict(model_catalog().presets)
    except ValueError:  # a broken PICOBOT_CONFIG: tokens still count, cost is 0
        log.warning("usage rows: the model presets cannot be read; cost recorded as 0")
        return {}


def _owners(calls: Sequence[ProviderCall]) -> list[tuple[int | None, str]]:
    """``(user id, channel)`` per call: the scope's, else its dialog's (one query, for the calls
    whose scope lacks either)."""
    wanted = {
        c.scope.dialog_id
        for c in calls
        if c.scope.dialog_id and (c.scope.user_id is None or not c.scope.channel)
    }
    dialogs: dict[str, tuple[int | None, str]] = {}
    if wanted:
        for pk, owner_id, channel in Dialog.objects.filter(pk__in=wanted).values_list(
            "pk", "owner_id", "channel"
        ):
            dialogs[pk] = (owner_id, channel)
    owners = []
    for call in calls:
        owner_id, channel = dialogs.get(call.scope.dialog_id, (None, ""))
        user_id = call.scope.user_id if call.scope.user_id is not None else owner_id
        owners.append((user_id, call.scope.channel or channel))
    return owners


def _usernames(user_ids: set[int]) -> dict[int, str]:
    """``{pk: username}`` of the users that still exist (one query; none for no ids)."""
    if not user_ids:
        return {}
    return dict(get_user_model().objects.filter(pk__in=user_ids).values_list("pk", "username"))


def build_rows(calls: Sequence[ProviderCall]) -> list[UsageRecord]:
    """Unsaved rows for ``calls`` (two queries at most: dialogs lacking a user or channel, and
    the users' names). A preset no longer configured costs 0."""
    presets = _presets()
    owners = _owners(calls)
    names = _usernames({user_id for user_id, _ in owners if user_id is not None})
    rows = []
    for call, (user_id, channel) in zip(calls, owners, strict=True):
        used = account(call, presets.get(call.preset))
        rows.append(
            UsageRecord(
                created_at=int(call.started_at * 1000),
                day=datetime.fromtimestamp(call.started_at, UTC).date(),
                user_id=user_id if user_id in names else None,  # a user deleted since: the name is gone too
                username=_cut(names.get(user_id, ""), "username"),
                dialog_id=_cut(call.scope.dialog_id, "dialog_id"),
                turn_id=_cut(call.scope.turn_id, "turn_id"),
                channel=_cut(channel, "channel"),
                preset=_cut(call.preset, "preset"),
                provider=_cut(call.provider or "", "provider"),
                model=_cut(call.model or "", "model"),
                kind=call.scope.kind if call.scope.kind in UsageRecord.Kind.values else UsageRecord.Kind.TURN,
                outcome=_cut(call.outcome, "outcome"),
                input_tokens=used.input_tokens,
                output_tokens=used.output_tokens,
                cached_tokens=used.cached_tokens,
                reasoning_tokens=used.reasoning_tokens,
                estimated=used.estimated,
                latency_ms=max(0, round(call.latency_s * 1000)),
                ttft_ms=None if call.ttft_s is None else max(0, round(call.ttft_s * 1000)),
                cost=used.cost,
            )
        )
    return rows


def record_calls(calls: Sequence[ProviderCall]) -> int:
    """Write one row per call in one ``bulk_create``; returns the rows written.

    A batch that the database refuses for a reason other than a transient error (a value a column
    rejects) is written row by row, and each row that still fails is logged and dropped, so one bad
    row never loses the others. Transient errors (``OperationalError``, ``InterfaceError``) are
    raised for ``run_storage`` to retry.
    """
    rows = build_rows(calls)
    try:
        with transaction.atomic():
            UsageRecord.objects.bulk_create(rows)
        return len(rows)
    except (OperationalError, InterfaceError):
        raise
    except DatabaseError:
        log.warning(
            "usage rows: a batch of %d was refused; writing them one by one", len(rows), exc_info=True
        )
    written = 0
    for row in rows:
        try:
            with transaction.atomic():
                row.save(force_insert=True)
            written += 1
        except (OperationalError, InterfaceError):
            raise
        except DatabaseError:
            log.error("usage row lost (refused by the database): %s", describe(row), exc_info=True)
    return written


def describe(row: UsageRecord) -> str:
    """A log line's worth of a row: what it counted, never content."""
    return (
        f"{row.kind} {row.preset} dialog={row.dialog_id or '-'} turn={row.turn_id or '-'} "
        f"user={row.user_id} in={row.input_tokens} out={row.output_tokens} cost={row.cost}"
    )


def describe_calls(calls: Sequence[ProviderCall], limit: int = 10) -> str:
    """A log line's worth of calls that could not be written: ``kind preset dialog`` of the first
    ``limit``, then how many more."""
    shown = "; ".join(f"{c.scope.kind} {c.preset} dialog={c.scope.dialog_id or '-'}" for c in calls[:limit])
    return shown + (f"; and {len(calls) - limit} more" if len(calls) > limit else "")
