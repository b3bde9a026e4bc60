"""Synchronous DB reads and writes of the REST API, each one short call through ``run_storage``.

Everything that changes a dialog goes through the storage services (``conversations.storage``);
what lives here composes them (find a dialog's chat, then act on it) or reads in bulk what a
storage function reads one at a time (the dialog list: a fixed number of queries per page).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db import connection

from conversations import storage
from conversations.models import ChatState, Dialog, InboxMessage
from conversations.usage.sums import dialog_usage


def safe_ref(value: str) -> bool:
    """False for an id or filter no dialog can have: NUL (PostgreSQL refuses it in a query) or a
    lone surrogate (not encodable)."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_ref(session_id: str) -> None:
    """Raise NotFoundError for an id no dialog can have (before it reaches the database)."""
    if not safe_ref(session_id):
        raise storage.NotFoundError("no such dialog")


def database_ping() -> None:
    """One round trip to the database (``GET /api/ready``)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def list_dialogs(owner: Any, channel: str | None, chat_id: str | None, limit: int, offset: int) -> dict:
    """``GET /api/dialogs``: the owner's live dialogs, most recently active first, paged.

    Items have ``storage.dialog_info``'s shape; five queries per page whatever its size.
    """
    rows = Dialog.objects.filter(owner=owner, deleted_at__isnull=True)
    for field, value in (("channel", channel), ("chat_id", chat_id)):
        if value is not None:
            if not safe_ref(value):
                return {"items": [], "total": 0, "limit": limit, "offset": offset}
            rows = rows.filter(**{field: value})
    total = rows.count()
    page = list(rows.order_by("-last_active_at", "id")[offset : offset + limit])
    ids = [d.id for d in page]
    active = set(
        ChatState.objects.filter(active_dialog_id__in=ids).values_list("active_dialog_id", flat=True)
    )
    statuses = Counter(
        InboxMessage.objects.filter(
            dialog_id__in=ids, status__in=[InboxMessage.Status.QUEUED, InboxMessage.Status.STARTED]
        ).values_list("dialog_id", "status")
    )
    usage = dialog_usage(ids)
    items = [
        storage.dialog_fields(
            d,
            queued=statuses[(d.id, InboxMessage.Status.QUEUED.value)],
            running=statuses[(d.id, InboxMessage.Status.STARTED.value)] > 0,
            active=d.id in active,
            usage=usage.get(d.id),
        )
        for d in page
    ]
    return {"items": items, "total": total, "limit": limit, "offset": offset}


def delete_owned(owner: Any, session_id: str) -> storage.DeletedDialog:
    """Soft-delete one of the owner's dialogs in its own chat (``storage.delete_dialog``)."""
    dialog = storage.dialog_for_user(owner, session_id)
    return storage.delete_dialog(owner, dialog.channel, dialog.chat_id, dialog.id)


def activate_owned(owner: Any, session_id: str) -> tuple[Dialog, dict]:
    """Make one of the owner's dialogs its chat's active dialog; returns it and its ``dialog_info``."""
    dialog = storage.dialog_for_user(owner, session_id)
    dialog = storage.switch_dialog(owner, dialog.channel, dialog.chat_id, dialog.id)
    return dialog, storage.dialog_info(owner, dialog.id)


def running_turn(owner: Any, session_id: str) -> tuple[Dialog, dict | None]:
    """The owner's dialog and its started turn (``storage.running_inbox`` item) or None."""
    dialog = storage.dialog_for_user(owner, session_id)
    running = storage.running_inbox(dialog.channel, dialog.chat_id)
    return dialog, next((item for item in running if item["session_id"] == dialog.id), None)


def client_msg_dialog(owner: Any, client_msg_id: str) -> str | None:
    """The dialog (deleted or not) of the owner's message sent with ``client_msg_id``, or None."""
    return (
        InboxMessage.objects.filter(user=owner, client_msg_id=client_msg_id)
        .values_list("dialog_id", flat=True)
        .first()
    )
