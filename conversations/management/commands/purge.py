"""``manage.py purge``: physically delete old dialogs (DESIGN §3 ``deleted_at``, §6 purge rules).

Soft-deleted dialogs (``/delete``) whose ``deleted_at`` is older than the retention (default 30
days, 0 = every soft-deleted dialog) go; with ``--inactive-days N`` also live dialogs whose
``last_active_at`` is older than N days. A dry run unless ``--apply``: it prints what would go.
Deleting a dialog deletes its history, inbox rows and plan (cascade) and its delivery-failure
rows; a chat whose active dialog goes gets its most recent other dialog (or a new one) on its
next message. A dialog with a
queued or started inbox row, or whose lease a worker holds, is never touched (checked again in
the deleting transaction). Usage rows (``UsageRecord``: tokens and cost per provider call, issue
17) are never deleted: they name their dialog by id, not by foreign key, so every total of
``GET /api/usage`` and the admin survives a purge (and a deleted user's rows keep the username).

``--user USERNAME`` purges every dialog that user owns instead (live or deleted, any age; busy
ones skipped) and the user's finished inbox rows elsewhere: the admin refuses to delete a user
who still owns dialogs (it cannot delete history rows), so this comes first (README).
"""

from __future__ import annotations

from django.core.management.base import CommandError, CommandParser
from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from conversations.management.commands._common import PicoBotCommand, bounded_int, find_user
from conversations.models import Dialog, InboxMessage, now_ms
from conversations.transfer.markdown import ms_to_text
from delivery.models import DeliveryFailure

DAY_MS = 86_400_000
MAX_DAYS = 36_500
"""Bound of ``--retention-days`` and ``--inactive-days`` (100 years): a larger number means the same
(nothing that old exists) and, times ``DAY_MS``, would not fit the database's integers."""
BATCH = 100


def purge_candidates(retention_days: int, inactive_days: int | None, now: int) -> Q:
    """The purge rule as a filter on Dialog (without the busy check)."""
    rule = Q(deleted_at__isnull=False)
    if retention_days > 0:
        rule &= Q(deleted_at__lte=now - retention_days * DAY_MS)
    if inactive_days is not None:
        rule |= Q(deleted_at__isnull=True, last_active_at__lt=now - inactive_days * DAY_MS)
    return rule


def busy() -> Q:
    """Dialogs a worker may be running: queued/started inbox rows, or a lease still held."""
    working = InboxMessage.objects.filter(
        dialog=OuterRef("pk"), status__in=[InboxMessage.Status.QUEUED, InboxMessage.Status.STARTED]
    )
    return Q(Exists(working)) | Q(lease_owner__isnull=False, lease_expires_at__gt=now_ms())


class Command(PicoBotCommand):
    help = (
        "Delete soft-deleted dialogs older than the retention (default 30 days; 0 = all soft-deleted) "
        "and, with --inactive-days N, live dialogs inactive for N days, with their messages, inbox rows "
        "and plans. A dry run that only lists them unless --apply is given. Dialogs with queued or "
        "running messages are skipped. --user USERNAME instead purges every dialog of that user, live "
        "or deleted, whatever its age (before deleting the user in the admin, which refuses while the "
        "user owns dialogs). Usage rows (tokens and cost) are kept: usage totals survive every purge."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--retention-days",
            type=bounded_int(0, MAX_DAYS),
            default=None,
            metavar="N",
            help="purge soft-deleted dialogs deleted more than N days ago (default 30; 0 = all of them)",
        )
        parser.add_argument(
            "--user",
            metavar="USERNAME",
            help="purge every dialog this user owns, live or deleted, whatever its age (not with the day options)",
        )
        parser.add_argument(
            "--inactive-days",
            type=bounded_int(1, MAX_DAYS),
            default=None,
            metavar="N",
            help="also purge live (not deleted) dialogs whose last activity is more than N days old",
        )
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--apply", action="store_true", help="really delete (default: dry run)")
        mode.add_argument(
            "--dry-run", action="store_true", help="only list what would be deleted (the default)"
        )

    def handle(
        self,
        *args: object,
        retention_days: int | None,
        inactive_days: int | None,
        user: str | None,
        apply: bool,
        **options: object,
    ) -> None:
        owner = None
        if user is not None:
            if retention_days is not None or inactive_days is not None:
                raise CommandError(
                    "--user purges all of the user's dialogs: leave out --retention-days/--inactive-days"
                )
            owner = find_user(user)
            if owner is None:
                raise CommandError(f"no user {user!r}")
        retention_days = 30 if retention_days is None else retention_days
        verbosity = int(options.get("verbosity", 1))
        now = now_ms()
        rule = Q(owner=owner) if owner is not None else purge_candidates(retention_days, inactive_days, now)
        matching = Dialog.objects.filter(rule)
        skipped = matching.filter(busy()).count()
        chosen = matching.exclude(busy()).order_by("last_active_at")
        if not apply:
            self.stdout.write("Dry run: nothing is deleted (add --apply to delete).")
        total_dialogs = total_messages = 0
        for d in chosen.only("id", "title", "deleted_at", "last_active_at", "total_message_count").iterator(
            chunk_size=500
        ):
            total_dialogs += 1
            total_messages += d.total_message_count
            if verbosity >= 1:
                why = (
                    f"deleted {ms_to_text(d.deleted_at)}"
                    if d.deleted_at
                    else f"inactive since {ms_to_text(d.last_active_at)}"
                )
                if owner is not None:
                    why = f"owned by {owner.get_username()}, " + (
                        "deleted" if d.deleted_at else f"last active {ms_to_text(d.last_active_at)}"
                    )
                verb = "would purge" if not apply else "purging"
                self.stdout.write(f"{verb} {d.id} {d.title!r}: {why}, {d.total_message_count} message(s)")
        skip_note = (
            f"; skipped {skipped} busy dialog(s) (queued or running messages, or a held lease)"
            if skipped
            else ""
        )
        if not apply:
            self.stdout.write(
                f"Would purge {total_dialogs} dialog(s) with {total_messages} message(s){skip_note}."
            )
            return
        deleted_dialogs = deleted_messages = 0
        while True:
            # Re-select in each transaction: a message may have arrived since the listing.
            with transaction.atomic():
                batch = list(
                    Dialog.objects.filter(rule)
                    .exclude(busy())
                    .order_by("last_active_at")
                    .values_list("pk", "total_message_count")[:BATCH]
                )
                if not batch:
                    break
                ids = [pk for pk, _ in batch]
                _, per_model = Dialog.objects.filter(pk__in=ids).delete()
                # No foreign key (delivery does not depend on conversations): cleared by id.
                DeliveryFailure.objects.filter(dialog_id__in=ids).delete()
            deleted_dialogs += per_model.get("conversations.Dialog", 0)
            deleted_messages += per_model.get("conversations.Message", 0)
            self.stderr.write(
                f"  purged {deleted_dialogs}/{total_dialogs} dialog(s), {deleted_messages} message(s)…"
            )
        if owner is not None:
            # Their finished inbox rows in dialogs of others (shared chats) would still hold the user.
            InboxMessage.objects.filter(user=owner).exclude(
                status__in=[InboxMessage.Status.QUEUED, InboxMessage.Status.STARTED]
            ).delete()
        self.stdout.write(
            f"Purged {deleted_dialogs} dialog(s) with {deleted_messages} message(s){skip_note}."
        )
