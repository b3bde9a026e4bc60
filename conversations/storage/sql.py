"""Hand-written SQL for the statements every turn runs (DESIGN §5, the cost rules).

The ORM compiles each query anew: 0.3–0.7 ms of Python per statement on a small machine, about
ten times the statement itself on SQLite, all of it under the GIL that the event loop needs. The
statements on every turn's path — the lease check, the lease claim, the inbox row's moves, the
dialog's counters — are written here once instead, portable across SQLite and PostgreSQL
(``%s`` parameters through Django's cursor, UUIDs adapted by the model field). The rest of the
storage layer stays ORM; inserts stay ORM so that model defaults keep applying.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import connection

from conversations.models import ChatState, Dialog, InboxMessage

DIALOG = Dialog._meta.db_table
INBOX = InboxMessage._meta.db_table
CHAT_STATE = ChatState._meta.db_table

# Every Dialog column that reads back the same on every backend (a BooleanField would come back as
# 0/1 from SQLite without the ORM's converters: it stays deferred, loaded on first access).
_DIALOG_FIELDS = [f for f in Dialog._meta.concrete_fields if f.get_internal_type() != "BooleanField"]
_DIALOG_COLUMNS = ", ".join(connection.ops.quote_name(f.column) for f in _DIALOG_FIELDS)
_DIALOG_ATTNAMES = frozenset(f.attname for f in _DIALOG_FIELDS)
_UUID_FIELD = InboxMessage._meta.get_field("id")


def fetch_one(sql: str, params: list) -> tuple | None:
    """The first row of ``sql`` (or None)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def fetch_all(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def execute(sql: str, params: list) -> int:
    """Run ``sql``; returns the number of rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def uuid_param(value: uuid.UUID | str) -> Any:
    """A UUID as the database takes it (32 hex characters on SQLite, a uuid on PostgreSQL)."""
    return _UUID_FIELD.get_db_prep_value(value, connection)


def as_uuid(value: Any) -> uuid.UUID | None:
    """A UUID column's value as read back (a ``UUID`` from PostgreSQL, hex text from SQLite)."""
    if value is None or isinstance(value, uuid.UUID):
        return value
    return uuid.UUID(value)


def dialog_row(dialog_id: str, *, for_update: bool = False) -> Dialog | None:
    """The dialog as a model instance read in one statement (``FOR UPDATE`` where the database
    has it, inside the caller's transaction), or None when there is no such row."""
    lock = " FOR UPDATE" if for_update and connection.features.has_select_for_update else ""
    row = fetch_one(f"SELECT {_DIALOG_COLUMNS} FROM {DIALOG} WHERE id = %s{lock}", [dialog_id])
    return None if row is None else Dialog.from_db(connection.alias, _DIALOG_ATTNAMES, row)


_CHAT_STATE_FIELDS = ChatState._meta.concrete_fields
_CHAT_STATE_COLUMNS = ", ".join(connection.ops.quote_name(f.column) for f in _CHAT_STATE_FIELDS)
_CHAT_STATE_ATTNAMES = [f.attname for f in _CHAT_STATE_FIELDS]


def chat_state(channel: str, chat_id: str) -> ChatState | None:
    """The chat's state row as a model instance (every column is a plain value), or None."""
    row = fetch_one(f"SELECT {_CHAT_STATE_COLUMNS} FROM {CHAT_STATE} WHERE channel = %s AND chat_id = %s",
                    [channel, chat_id])
    return None if row is None else ChatState.from_db(connection.alias, _CHAT_STATE_ATTNAMES, row)


_QUEUED_FIELDS = ("id", "content", "media", "source", "received_at", "channel_context")
_QUEUED_JSON = ("media", "source", "channel_context")


def next_queued(dialog_id: str) -> InboxMessage | None:
    """The dialog's oldest queued inbox row with what a turn start needs (the rest deferred)."""
    row = fetch_one(
        f"SELECT {', '.join(_QUEUED_FIELDS)} FROM {INBOX} WHERE dialog_id = %s AND status = %s "
        "ORDER BY position LIMIT 1",
        [dialog_id, InboxMessage.Status.QUEUED],
    )
    if row is None:
        return None
    values = dict(zip(_QUEUED_FIELDS, row, strict=True))
    values["id"] = as_uuid(values["id"])
    for name in _QUEUED_JSON:  # JSON columns come back as text (Django reads jsonb as text too)
        if isinstance(values[name], str):
            values[name] = json.loads(values[name])
    message = InboxMessage.from_db(connection.alias, _QUEUED_ATTNAMES, [values[f] for f in _QUEUED_ORDER])
    message.dialog_id = dialog_id
    message.status = InboxMessage.Status.QUEUED
    return message


_QUEUED_ORDER = [f.attname for f in InboxMessage._meta.concrete_fields if f.attname in _QUEUED_FIELDS]
_QUEUED_ATTNAMES = frozenset(_QUEUED_ORDER)


def has_inbox_rows(dialog_id: str, status: str) -> bool:
    """Whether the dialog has an inbox row in ``status`` (a read: no write lock is taken)."""
    return fetch_one(f"SELECT 1 FROM {INBOX} WHERE dialog_id = %s AND status = %s LIMIT 1", [dialog_id, status]) is not None
