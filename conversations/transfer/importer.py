"""Importing an export document: all of it in one transaction, or nothing (writes the DB).

The document is validated first (``schema.validate_document``); then each dialog is created with
its messages and plan. Owners are matched by username, or all given to one user; a ``cli_chat``
dialog moves to its owner's chat here. Lease and inbox state start empty. Fields the file leaves
out take the column defaults, except the counters and times derived from the messages.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from conversations.models import Dialog, Message, Plan, now_ms
from conversations.transfer.errors import TransferError
from conversations.transfer.export import BULK_BATCH
from conversations.transfer.schema import DIALOG_FIELDS, MESSAGE_FIELDS, clean_plan_content, validate_document

CLI_CHAT_CHANNEL = "cli_chat"
"""cli_chat chats are per user: their chat_id is the owner's user id (``conversations.chat.consumer``)."""
_KEY_FIELDS = frozenset({"id", "channel", "chat_id", "dialog_id"})


@dataclass(frozen=True)
class ImportedDialog:
    """One imported dialog: its id in the file and in this database, and its message count."""

    source_id: str
    id: str
    messages: int


def _owner_for(d: dict, user: Any, cache: dict[str, Any]) -> Any:
    if user is not None:
        return user
    name = d.get("owner")
    if name is None:
        return None
    if name not in cache:
        found = get_user_model().objects.filter(username=name).first()
        if found is None:
            raise TransferError(
                f"owner {name!r} of {d.get('id') or d['dialog_id']!r} is not a user here: create it "
                f"(manage.py createtoken {name!r}) or import with --user USERNAME"
            )
        cache[name] = found
    return cache[name]


def _new_dialog_id(channel: str, chat_id: str, taken: set[str]) -> str:
    while True:
        dialog_id = secrets.token_hex(4)
        unified = Dialog.unified_id(channel, chat_id, dialog_id)
        if unified not in taken and not Dialog.objects.filter(pk=unified).exists():
            return dialog_id


def import_document(
    doc: Any,
    *,
    user: Any = None,
    as_new: bool = False,
    progress: Callable[[ImportedDialog], None] | None = None,
) -> list[ImportedDialog]:
    """Import an export document (validated first) in one transaction: all of it or nothing.

    ``user``: owner of every imported dialog (else each dialog's ``owner`` username, which must
    exist here). A ``cli_chat`` dialog moves to its owner's chat (its ``chat_id`` is the owner's
    user id here, as the WebSocket consumer expects); one without an owner is refused unless
    ``user`` is given (its chat id could name another user's chat here). ``as_new``: new dialog ids
    and message ids (the file can be imported again beside the original); without it an
    existing dialog or message id is an error. Lease and inbox state start empty.

    Raises TransferError (nothing written).
    """
    dialogs = validate_document(doc)
    done: list[ImportedDialog] = []
    owners: dict[str, Any] = {}
    taken: set[str] = set()
    with transaction.atomic():
        for i, d in enumerate(dialogs):
            owner = _owner_for(d, user, owners)
            if d["channel"] == CLI_CHAT_CHANNEL and owner is None:
                # Its chat would be whichever user has that id here: never guess (another user's chat).
                raise TransferError(
                    f"dialogs[{i}] ({d.get('id') or d['dialog_id']!r}) is a cli_chat dialog without an owner: "
                    "a cli_chat chat belongs to one user; import it with --user USERNAME"
                )
            chat_id = d["chat_id"]
            if d["channel"] == CLI_CHAT_CHANNEL and owner is not None:
                chat_id = str(owner.pk)
            dialog_id = _new_dialog_id(d["channel"], chat_id, taken) if as_new else d["dialog_id"]
            unified = Dialog.unified_id(d["channel"], chat_id, dialog_id)
            source_id = d.get("id") or Dialog.unified_id(d["channel"], d["chat_id"], d["dialog_id"])
            if unified in taken or Dialog.objects.filter(pk=unified).exists():
                raise TransferError(f"dialog {unified!r} already exists: import with --as-new for a copy")
            taken.add(unified)
            messages = d["messages"]
            fields = {name: d[name] for name in DIALOG_FIELDS if name in d and name not in _KEY_FIELDS}
            now = now_ms()
            fields.setdefault("created_at", messages[0].get("created_at", now) if messages else now)
            fields.setdefault("last_active_at", messages[-1].get("created_at", now) if messages else now)
            fields.setdefault("message_count", sum(1 for m in messages if m["role"] == "user"))
            fields.setdefault("total_message_count", len(messages))
            fields.setdefault("history_revision", len(messages))
            dialog = Dialog.objects.create(
                id=unified,
                channel=d["channel"],
                chat_id=chat_id,
                dialog_id=dialog_id,
                owner=owner,
                **fields,
            )
            rows = [_message_row(dialog, m, as_new) for m in messages]
            if not as_new:
                ids = [r.id for r in rows]
                clash = Message.objects.filter(pk__in=ids).values_list("pk", "dialog_id").first()
                if clash is not None:
                    raise TransferError(
                        f"message {clash[0]} already exists (in dialog {clash[1]!r}): import with --as-new"
                    )
            for start in range(0, len(rows), BULK_BATCH):
                Message.objects.bulk_create(rows[start : start + BULK_BATCH])
            plan = d.get("plan")
            if plan is not None:
                updated_at = plan.get("updated_at")
                Plan.objects.create(
                    dialog=dialog,
                    content=clean_plan_content(plan["content"]),
                    updated_at=now_ms() if updated_at is None else updated_at,
                )
            item = ImportedDialog(source_id, unified, len(rows))
            done.append(item)
            if progress is not None:
                progress(item)
    return done


def _message_row(dialog: Dialog, m: dict, as_new: bool) -> Message:
    values = {name: m[name] for name in MESSAGE_FIELDS if name in m and name not in ("seq", "role")}
    if as_new or "id" not in values:
        values["id"] = uuid.uuid4()
    values.setdefault("created_at", dialog.created_at)
    return Message(dialog=dialog, seq=m["seq"], role=m["role"], **values)
