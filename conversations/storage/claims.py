"""Requests every server process must see: stops of a turn and manual-compaction claims.

Several ``serve`` processes may share one database (scale-out, DESIGN §2); what one of them was
asked must bind the others, so these marks live in the dialog's rows, not in process memory:

- ``InboxMessage.stop_requested_at``: a client asked to stop that row's turn. A stop without a
  ``turn_id`` that arrives within ``STOP_REPEAT_MS`` of it, after that turn ended, is the same
  stop again (a double click, a retry on another process) — answered, never applied to the next
  turn.
- ``Dialog.compaction_claimed_at``: a manual compaction of the dialog runs somewhere. Claimed by a
  conditional update, released when it ends; a claim older than the caller's ``stale_after_ms``
  (its process died) may be taken over. Fifteen ``/compact`` in a row on any processes are one
  paid summary call.
"""

from __future__ import annotations

from django.db.models import Q

from conversations.models import Dialog, InboxMessage, now_ms

STOP_REPEAT_MS = 3_000
"""A stop without ``turn_id`` this soon after a stop of an ended turn repeats that stop (ms)."""


def note_stop_requested(dialog_id: str, turn_id: str) -> None:
    """Record that a client asked to stop ``turn_id`` of the dialog (now, ms). Touches the DB."""
    InboxMessage.objects.filter(dialog_id=dialog_id, turn_id=turn_id).update(stop_requested_at=now_ms())


def repeated_stop(
    dialog_id: str, running_turn_id: str | None, *, within_ms: int = STOP_REPEAT_MS
) -> str | None:
    """The turn id a new stop (without ``turn_id``) repeats, or None when it is a stop of its own.

    A repeat: another turn of the dialog runs now (``running_turn_id``), and a stop of an earlier
    turn was asked in the last ``within_ms``. Nothing running → None (the caller answers "nothing
    is running"); the same turn still running → None (stopping it again is harmless).
    """
    if running_turn_id is None:
        return None
    recent = (
        InboxMessage.objects.filter(dialog_id=dialog_id, stop_requested_at__gte=now_ms() - within_ms)
        .exclude(turn_id=running_turn_id)
        .order_by("-stop_requested_at")
        .values_list("turn_id", flat=True)
        .first()
    )
    return str(recent) if recent is not None else None


def claim_compaction(dialog_id: str, stale_after_ms: int) -> int | None:
    """Claim the dialog's manual compaction: the claim's stamp (ms), or None while another runs.

    One conditional UPDATE (atomic on SQLite and PostgreSQL): free, or claimed more than
    ``stale_after_ms`` ago (the claiming process died before releasing it).
    """
    now = now_ms()
    free = Q(compaction_claimed_at__isnull=True) | Q(compaction_claimed_at__lt=now - stale_after_ms)
    taken = Dialog.objects.filter(free, pk=dialog_id).update(compaction_claimed_at=now)
    return now if taken else None


def release_compaction(dialog_id: str, stamp: int) -> None:
    """Release the claim ``stamp`` (a claim taken over meanwhile stays)."""
    Dialog.objects.filter(pk=dialog_id, compaction_claimed_at=stamp).update(compaction_claimed_at=None)
