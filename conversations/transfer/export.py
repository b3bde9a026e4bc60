"""Selecting dialogs and writing them as an export document or a Markdown transcript (reads the DB).

The JSON form (``schema.py``: ``{format, version, exported_at, dialogs}``) holds every history
column under its model name (``provider_state``, ``tool_calls`` with ``raw_arguments``,
``reasoning_content``, ``source``, ``media_refs`` with their data, …), so an import of it gives
the same rows and a second export the same document. Runtime-only dialog columns (the lease,
``inbox_position``) and the inbox are not exported. The file holds ``provider_state`` and media,
which never go to clients: keep it as private as the database.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from conversations.models import Dialog, Message, Plan, now_ms
from conversations.transfer.errors import TransferError
from conversations.transfer.markdown import markdown_dialog
from conversations.transfer.schema import DIALOG_FIELDS, EXPORT_FORMAT, EXPORT_VERSION, MESSAGE_FIELDS

BULK_BATCH = 1000
"""Message rows read (and, on import, written) per database round trip."""

Progress = Callable[[dict[str, Any]], None]


def select_dialogs(
    *,
    dialog_ids: Iterable[str] = (),
    chat: str | None = None,
    username: str | None = None,
    include_deleted: bool = False,
) -> QuerySet[Dialog]:
    """The dialogs to export, oldest first.

    ``dialog_ids``: these dialogs (soft-deleted ones too: the operator named them); ``chat``:
    ``"CHANNEL:CHAT_ID"``; ``username``: every dialog that user owns. Soft-deleted dialogs of a
    chat or a user only with ``include_deleted``. Raises TransferError for an unknown dialog,
    chat or user, or a chat without a ``:``.
    """
    ids = list(dialog_ids)
    rows = Dialog.objects.select_related("owner").order_by("channel", "chat_id", "created_at", "id")
    if ids:
        found = set(Dialog.objects.filter(pk__in=ids).values_list("pk", flat=True))
        missing = [i for i in ids if i not in found]
        if missing:
            raise TransferError(f"no dialog {missing[0]!r}")
        return rows.filter(pk__in=ids)
    if chat is not None:
        channel, sep, chat_id = chat.partition(":")
        if not sep or not channel or not chat_id:
            raise TransferError(f"--chat takes CHANNEL:CHAT_ID (e.g. cli_chat:1), got {chat!r}")
        rows = rows.filter(channel=channel, chat_id=chat_id)
        if not rows.exists():
            raise TransferError(f"no dialogs in chat {chat!r}")
    elif username is not None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise TransferError(f"no user {username!r}")
        rows = rows.filter(owner=user)
    else:
        raise TransferError(
            "name what to export: --dialog SESSION_ID, --chat CHANNEL:CHAT_ID or --user USERNAME"
        )
    if not include_deleted:
        rows = rows.filter(deleted_at__isnull=True)
    return rows


def _message_dict(row: Message) -> dict[str, Any]:
    out = {name: getattr(row, name) for name in MESSAGE_FIELDS}
    out["id"] = str(row.id)
    out["turn_id"] = str(row.turn_id) if row.turn_id else None
    return out


def dialog_to_dict(dialog: Dialog) -> dict[str, Any]:
    """One dialog of the export document, its messages in seq order. Reads the DB."""
    out: dict[str, Any] = {name: getattr(dialog, name) for name in DIALOG_FIELDS}
    out["owner"] = dialog.owner.get_username() if dialog.owner_id else None
    plan = Plan.objects.filter(dialog=dialog).first()
    out["plan"] = {"content": plan.content, "updated_at": plan.updated_at} if plan else None
    rows = Message.objects.filter(dialog=dialog).order_by("seq").iterator(chunk_size=BULK_BATCH)
    out["messages"] = [_message_dict(m) for m in rows]
    return out


def iter_export(dialogs: Iterable[Dialog]) -> Iterator[dict[str, Any]]:
    """The export dicts of ``dialogs``, one at a time (one dialog in memory at once)."""
    for dialog in dialogs:
        yield dialog_to_dict(dialog)


def write_json(dialogs: Iterable[Dialog], out: IO[str], progress: Progress | None = None) -> tuple[int, int]:
    """Write the JSON document of ``dialogs`` to ``out`` (one dialog per line; streamed).

    Returns ``(dialogs, messages)`` written. ``progress`` is called after each dialog.
    """
    head = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "exported_at": now_ms()}
    out.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "dialogs": [')
    count = messages = 0
    for item in iter_export(dialogs):
        out.write(("," if count else "") + "\n" + json.dumps(item, ensure_ascii=False))
        count += 1
        messages += len(item["messages"])
        if progress is not None:
            progress(item)
    out.write("\n]}\n")
    return count, messages


def write_markdown(
    dialogs: Iterable[Dialog], out: IO[str], progress: Progress | None = None
) -> tuple[int, int]:
    """Write a readable Markdown transcript of ``dialogs``; returns ``(dialogs, messages)``."""
    count = messages = 0
    for item in iter_export(dialogs):
        out.write(("\n---\n\n" if count else "") + markdown_dialog(item))
        count += 1
        messages += len(item["messages"])
        if progress is not None:
            progress(item)
    return count, messages
