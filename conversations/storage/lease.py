"""Dialog leases: per-dialog serial execution across processes (DESIGN §2).

A lease is ``(lease_owner, lease_epoch, lease_expires_at)`` on the dialog row. Its holder renews
every lease it owns in one statement (``renew_worker_leases``, from the worker's own thread:
``conversations.runtime.lease_keeper``), so a live process keeps its dialogs however busy its event loop
is; a lease lapses only when its owner stopped renewing (dead, hung, or cut off from the
database), and only then may another worker claim it: after seeing it lapsed and unchanged
for a while (``claim_lease(takeover=…)``). Every state write checks the epoch.
"""

from __future__ import annotations

from django.db import transaction

from conversations.models import Dialog, now_ms
from conversations.storage import sql
from conversations.storage.shapes import LeaseLostError

Takeover = tuple[str, int | None]
"""``(lease_owner, lease_expires_at)`` of another worker's lapsed lease, as observed."""


def claim_lease(
    dialog_id: str, worker_id: str, lease_ms: int, *, takeover: Takeover | None = None
) -> int | None:
    """Take the dialog's lease if it is free or already ``worker_id``'s; with ``takeover``, also
    another worker's lease that lapsed and was not renewed since it was observed.

    ``takeover`` is ``(lease_owner, lease_expires_at)`` exactly as a scan read them
    (``dialogs_needing_work``) at least one renewal interval before: the claim succeeds only if
    the row still holds those values and they lie in the past — a compare-and-set, so an owner
    that renewed in between (it was only slow, e.g. behind a storage lock) keeps its dialog.

    Returns the new epoch (every claim bumps it, so an older holder's writes are refused), or
    None when another worker holds it or the dialog is deleted (nothing of it runs again).
    One conditional UPDATE: atomic on SQLite and PostgreSQL alike.
    """
    now = now_ms()
    claimable, params = "(lease_owner IS NULL OR lease_owner = %s", [worker_id]
    if takeover is not None:
        owner, expires_at = takeover
        if expires_at is not None:  # a lapsed lease has an expiry; NULL never equals anything in SQL
            claimable += " OR (lease_owner = %s AND lease_expires_at = %s AND lease_expires_at < %s)"
            params += [owner, expires_at, now]
    with transaction.atomic():
        updated = sql.execute(
            f"UPDATE {sql.DIALOG} SET lease_owner = %s, lease_epoch = lease_epoch + 1, lease_expires_at = %s "
            f"WHERE id = %s AND deleted_at IS NULL AND {claimable})",
            [worker_id, now + lease_ms, dialog_id, *params],
        )
        if not updated:
            return None
        return sql.fetch_one(f"SELECT lease_epoch FROM {sql.DIALOG} WHERE id = %s", [dialog_id])[0]


def renew_worker_leases(worker_id: str, lease_ms: int) -> int:
    """Extend every lease ``worker_id`` owns to now + ``lease_ms``, lapsed ones included.

    One UPDATE (indexed on ``lease_owner``) however many dialogs the worker holds: a lease that
    lapsed while its owner was alive and that nobody claimed is simply renewed (slow is not dead).
    Returns how many leases were renewed.
    """
    return Dialog.objects.filter(lease_owner=worker_id).update(lease_expires_at=now_ms() + lease_ms)


def lease_epochs(dialog_ids: list[str]) -> dict[str, tuple[str | None, int]]:
    """``{dialog_id: (lease_owner, lease_epoch)}`` of the given dialogs (missing ids are absent)."""
    rows = Dialog.objects.filter(pk__in=dialog_ids).values_list("pk", "lease_owner", "lease_epoch")
    return {pk: (owner, epoch) for pk, owner, epoch in rows}


def release_lease(dialog_id: str, worker_id: str, epoch: int) -> bool:
    """Give the lease up (the dialog went idle); False when it was no longer ours."""
    return bool(
        sql.execute(
            f"UPDATE {sql.DIALOG} SET lease_owner = NULL, lease_expires_at = NULL "
            "WHERE id = %s AND lease_owner = %s AND lease_epoch = %s",
            [dialog_id, worker_id, epoch],
        )
    )


def check_lease(dialog_id: str, worker_id: str, epoch: int) -> Dialog:
    """The dialog, locked for the caller's transaction, if ``worker_id`` holds its lease at
    ``epoch``; raises ``LeaseLostError`` otherwise (also for a missing row)."""
    dialog = sql.dialog_row(dialog_id, for_update=True)
    if dialog is None or dialog.lease_owner != worker_id or dialog.lease_epoch != epoch:
        raise LeaseLostError(f"lease of {dialog_id} lost (epoch {epoch})")
    return dialog
