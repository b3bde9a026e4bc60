"""Dialog leases: per-dialog serial execution across processes (DESIGN §2)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F, Q

from conversations.models import Dialog, now_ms
from conversations.storage.shapes import LeaseLostError


def claim_lease(dialog_id: str, worker_id: str, lease_ms: int) -> int | None:
    """Take the dialog's lease if it is free, expired or already ``worker_id``'s.

    Returns the new epoch (every claim bumps it, so an older holder's writes are refused), or
    None when another live worker holds it or the dialog is deleted (nothing of it runs again).
    One conditional UPDATE: atomic on SQLite and PostgreSQL alike.
    """
    now = now_ms()
    with transaction.atomic():
        updated = (
            Dialog.objects.filter(pk=dialog_id, deleted_at__isnull=True)
            .filter(Q(lease_owner__isnull=True) | Q(lease_owner=worker_id) | Q(lease_expires_at__lt=now))
            .update(lease_owner=worker_id, lease_epoch=F("lease_epoch") + 1, lease_expires_at=now + lease_ms)
        )
        if not updated:
            return None
        return Dialog.objects.values_list("lease_epoch", flat=True).get(pk=dialog_id)


def renew_lease(dialog_id: str, worker_id: str, epoch: int, lease_ms: int) -> bool:
    """Extend a held lease; False when it was lost (another worker claimed it)."""
    return bool(
        Dialog.objects.filter(pk=dialog_id, lease_owner=worker_id, lease_epoch=epoch).update(
            lease_expires_at=now_ms() + lease_ms
        )
    )


def release_lease(dialog_id: str, worker_id: str, epoch: int) -> bool:
    """Give the lease up (the dialog went idle); False when it was no longer ours."""
    return bool(
        Dialog.objects.filter(pk=dialog_id, lease_owner=worker_id, lease_epoch=epoch).update(
            lease_owner=None, lease_expires_at=None
        )
    )


def check_lease(dialog_id: str, worker_id: str, epoch: int) -> Dialog:
    dialog = Dialog.objects.select_for_update().filter(pk=dialog_id).first()
    if dialog is None or dialog.lease_owner != worker_id or dialog.lease_epoch != epoch:
        raise LeaseLostError(f"lease of {dialog_id} lost (epoch {epoch})")
    return dialog
