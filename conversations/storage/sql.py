"""Hand-written SQL for the statements every turn runs (DESIGN §5, the cost rules).

The ORM compiles each query anew: 0.3–0.7 ms of Python per statement on a small machine, about
ten times the statement itself on SQLite, all of it under the GIL that the event loop needs. The
statements on every turn's path — the lease check and claim, the inbox row's moves, the dialog's
counters — are plain SQL instead, portable across SQLite and PostgreSQL (``%s`` parameters through
Django's cursor, UUIDs adapted by the model field). This module has the cursor helpers and the
shared reads that build model instances; single statements are written where they are used
(``lease``, ``turns``, ``inbox``, the turn input's dialog context, memory recall). The rest of the
storage layer stays ORM, and inserts stay ORM so that model defaults keep applying.

JSON columns come back as text on both databases (Django registers psycopg's ``jsonb`` loader as
text) and are decoded here (:func:`json_value`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import connection

from conversations.agent.automated_input import origin_of
from conversations.models import ChatState, Dialog, InboxMessage, MemoryItem, Message, Plan

DIALOG = Dialog._meta.db_table
INBOX = InboxMessage._meta.db_table
CHAT_STATE = ChatState._meta.db_table
MESSAGE = Message._meta.db_table
PLAN = Plan._meta.db_table
MEMORY = MemoryItem._meta.db_table

_UUID_FIELD = InboxMessage._meta.get_field("id")


class _Columns:
    """Some columns of a model, in its field order: the ``SELECT`` list and the instance built
    from a row of it (the other fields deferred, loaded on first access)."""

    def __init__(self, model: type, keep: Any) -> None:
        fields = [f for f in model._meta.concrete_fields if keep(f)]
        self.model = model
        self.sql = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        self.attnames = [f.attname for f in fields]
        self._attname_set = frozenset(self.attnames)

    def load(self, row: Any) -> Any:
        return self.model.from_db(connection.alias, self._attname_set, row)


# Every Dialog column that reads back the same on every backend (a BooleanField would come back as
# 0/1 from SQLite without the ORM's converters: it stays deferred).
_DIALOG = _Columns(Dialog, lambda f: f.get_internal_type() != "BooleanField")
_CHAT_STATE = _Columns(ChatState, lambda f: True)  # every column is a plain value
_QUEUED_JSON = ("media", "source", "channel_context")
_QUEUED = _Columns(
    InboxMessage,
    lambda f: f.attname in {"id", "content", "received_at", "model", "instructions", *_QUEUED_JSON},
)


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
    row = fetch_one(f"SELECT {_DIALOG.sql} FROM {DIALOG} WHERE id = %s{lock}", [dialog_id])
    return None if row is None else _DIALOG.load(row)


def chat_state(channel: str, chat_id: str) -> ChatState | None:
    """The chat's state row as a model instance, or None."""
    row = fetch_one(
        f"SELECT {_CHAT_STATE.sql} FROM {CHAT_STATE} WHERE channel = %s AND chat_id = %s", [channel, chat_id]
    )
    return None if row is None else _CHAT_STATE.load(row)


def next_queued(dialog_id: str) -> InboxMessage | None:
    """The dialog's oldest queued inbox row with what a turn start needs (the rest deferred)."""
    row = fetch_one(
        f"SELECT {_QUEUED.sql} FROM {INBOX} WHERE dialog_id = %s AND status = %s ORDER BY position LIMIT 1",
        [dialog_id, InboxMessage.Status.QUEUED],
    )
    if row is None:
        return None
    values = [
        as_uuid(value) if name == "id" else json_value(value) if name in _QUEUED_JSON else value
        for name, value in zip(_QUEUED.attnames, row, strict=True)
    ]
    message = _QUEUED.load(values)
    message.dialog_id = dialog_id
    message.status = InboxMessage.Status.QUEUED
    return message


def has_inbox_rows(dialog_id: str, status: str) -> bool:
    """Whether the dialog has an inbox row in ``status`` (a read: no write lock is taken)."""
    return (
        fetch_one(f"SELECT 1 FROM {INBOX} WHERE dialog_id = %s AND status = %s LIMIT 1", [dialog_id, status])
        is not None
    )


def json_value(value: Any) -> Any:
    """A JSON column's value as read back: its text decoded (SQL NULL stays None)."""
    return json.loads(value) if isinstance(value, str) else value


_HISTORY_COLUMNS = (
    "id, seq, role, content, reasoning_content, tool_calls, tool_call_id, tool_name, is_error, turn_id, "
    "iteration, completion_status, truncated, created_at, provider_state, media_refs, source"
)


def _history_row(row: tuple) -> dict:
    (
        id_,
        seq,
        role,
        content,
        reasoning,
        tool_calls,
        tool_call_id,
        tool_name,
        is_error,
        turn_id,
        iteration,
        completion_status,
        truncated,
        created_at,
        provider_state,
        media_refs,
        source,
    ) = row
    turn = as_uuid(turn_id)
    return {
        "id": str(as_uuid(id_)),
        "seq": seq,
        "role": role,
        "content": content,
        "reasoning": reasoning,
        "tool_calls": json_value(tool_calls) or [],
        "tool_call_id": tool_call_id,
        "tool_name": tool_name,
        "is_error": bool(is_error),
        "turn_id": str(turn) if turn else None,
        "iteration": iteration,
        "completion_status": completion_status,
        "truncated": bool(truncated),
        "created_at": created_at,
        "origin": origin_of(json_value(source)),
        "provider_state": json_value(provider_state),
        "media_refs": json_value(media_refs) or [],
    }


def history_rows(dialog_id: str, after_seq: int) -> list[dict]:
    """The dialog's messages with ``seq > after_seq`` in ``seq`` order, in history form
    (``shapes.message_to_history_row``): one statement on the ``(dialog, seq)`` index."""
    rows = fetch_all(
        f"SELECT {_HISTORY_COLUMNS} FROM {MESSAGE} WHERE dialog_id = %s AND seq > %s ORDER BY seq",
        [dialog_id, after_seq],
    )
    return [_history_row(row) for row in rows]


def history_row(message_id: str) -> dict | None:
    """One message in history form, or None."""
    row = fetch_one(f"SELECT {_HISTORY_COLUMNS} FROM {MESSAGE} WHERE id = %s", [uuid_param(message_id)])
    return None if row is None else _history_row(row)


def dialog_context(dialog_id: str) -> tuple[int, int, Any, int | None] | None:
    """``(state_version, auto_compact_failures, plan content, plan updated_at)`` of a dialog (the
    plan's two None when it has none), or None when there is no such dialog."""
    row = fetch_one(
        f"SELECT d.state_version, d.auto_compact_failures, p.content, p.updated_at FROM {DIALOG} d "
        f"LEFT JOIN {PLAN} p ON p.dialog_id = d.id WHERE d.id = %s",
        [dialog_id],
    )
    return None if row is None else (row[0], row[1], json_value(row[2]), row[3])


def dialog_scope(dialog_id: str) -> tuple[int | None, str, str] | None:
    """``(owner_id, channel, chat_id)`` of a dialog, or None."""
    return fetch_one(f"SELECT owner_id, channel, chat_id FROM {DIALOG} WHERE id = %s", [dialog_id])


def has_memory_items(owner_id: int | None, channel: str, chat_id: str) -> bool:
    """Whether a memory scope (an owner's, or an ownerless chat's) holds any item."""
    if owner_id is not None:
        return fetch_one(f"SELECT 1 FROM {MEMORY} WHERE owner_id = %s LIMIT 1", [owner_id]) is not None
    return (
        fetch_one(
            f"SELECT 1 FROM {MEMORY} WHERE owner_id IS NULL AND channel = %s AND chat_id = %s LIMIT 1",
            [channel, chat_id],
        )
        is not None
    )
