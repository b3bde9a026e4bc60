"""Export and import of dialogs (issue 7; DESIGN §3 data model) shared by ``manage.py export`` and
``manage.py import``.

The JSON document is versioned::

    {"format": "picobot-export", "version": 1, "exported_at": <ms>,
     "dialogs": [{<DIALOG_FIELDS>, "owner": <username or null>, "plan": {content, updated_at} | null,
                  "messages": [{<MESSAGE_FIELDS>}, ...]}, ...]}

Every ``Message`` column is exported under its model name (``provider_state``, ``tool_calls``
with ``raw_arguments``, ``reasoning_content``, ``source``, ``media_refs`` with their data, …), so
an import of the document gives the same rows and a second export the same document (issue 7,
Must show 4). Runtime-only dialog columns (the lease of DESIGN §2, ``inbox_position``) are not
exported; the inbox is not (its done rows are not history, its queued rows belong to a live
server). The export is an operator's file: it holds ``provider_state`` and media, which never go
to clients (DESIGN §5) — keep it as private as the database.

Pure parts (no DB): :func:`validate_document`, :func:`markdown_dialog`. The rest reads or
writes the DB; :func:`import_document` runs in one transaction (all or nothing).
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet

from conversations.models import Dialog, Message, Plan, now_ms
from conversations.storage import scrub_nul

EXPORT_FORMAT = "picobot-export"
EXPORT_VERSION = 1
# cli_chat chats are per user: their chat_id is the owner's user id (conversations.consumers).
CLI_CHAT_CHANNEL = "cli_chat"

DIALOG_FIELDS = (
    "id",
    "channel",
    "chat_id",
    "dialog_id",
    "title",
    "title_is_default",
    "created_at",
    "last_active_at",
    "message_count",
    "total_message_count",
    "state_version",
    "history_revision",
    "usage_input_tokens",
    "usage_output_tokens",
    "model",
    "summary",
    "summary_seq",
    "auto_compact_failures",
    "title_attempted_at",
    "deleted_at",
)
# Every concrete Message column but the dialog key (tests check this stays complete).
MESSAGE_FIELDS = (
    "id",
    "seq",
    "role",
    "content",
    "reasoning_content",
    "provider_state",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "is_error",
    "media_refs",
    "turn_id",
    "iteration",
    "completion_status",
    "source",
    "created_at",
)
BULK_BATCH = 1000


class TransferError(Exception):
    """Bad input for an export or an import; the message says what and where."""


# --- selecting and exporting ------------------------------------------------------------------


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
        raise TransferError("name what to export: --dialog SESSION_ID, --chat CHANNEL:CHAT_ID or --user USERNAME")
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


def write_json(
    dialogs: Iterable[Dialog], out: IO[str], progress: Callable[[dict[str, Any]], None] | None = None
) -> tuple[int, int]:
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
    dialogs: Iterable[Dialog], out: IO[str], progress: Callable[[dict[str, Any]], None] | None = None
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


# --- Markdown (pure) ----------------------------------------------------------------------------


def ms_to_text(ms: int | None) -> str:
    """``ms`` since the epoch as ``YYYY-MM-DD HH:MM:SS UTC`` (``—`` for None)."""
    if ms is None:
        return "—"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fence(text: str, lang: str = "") -> str:
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}\n"


def _media_line(media: list) -> str:
    parts = []
    for item in media:
        if isinstance(item, dict):
            size = len(str(item.get("data", ""))) * 3 // 4
            parts.append(f"{item.get('mime_type', 'file')}, {size // 1024 or 1} KiB")
    return f"*[{len(parts)} attachment(s): {'; '.join(parts)}]*\n\n" if parts else ""


def markdown_dialog(item: dict[str, Any]) -> str:
    """A readable transcript of one export dict (pure).

    Reasoning goes into a collapsible ``<details>``, tool calls and tool results into code
    blocks; ``provider_state`` and media data are left out.
    """
    lines = [f"# {item.get('title') or 'Untitled'}\n\n"]
    deleted = f" · deleted {ms_to_text(item.get('deleted_at'))}" if item.get("deleted_at") else ""
    lines.append(
        f"`{item.get('id')}` · owner {item.get('owner') or '—'} · created {ms_to_text(item.get('created_at'))}"
        f" · last active {ms_to_text(item.get('last_active_at'))} · {len(item.get('messages', []))} messages"
        f"{deleted}\n\n"
    )
    if item.get("summary"):
        lines.append(
            f"<details><summary>Summary of messages 1–{item.get('summary_seq')}</summary>\n\n"
            f"{item['summary']}\n\n</details>\n\n"
        )
    for m in item.get("messages", []):
        role = m.get("role")
        status = m.get("completion_status")
        marker = "" if status in (None, "completed") else f" · *{status}*"
        when = ms_to_text(m.get("created_at"))
        if role == "tool":
            error = " · **error**" if m.get("is_error") else ""
            lines.append(
                f"#### Tool result `{m.get('tool_name') or '?'}` ({m.get('tool_call_id') or '?'})"
                f" · #{m.get('seq')} · {when}{error}{marker}\n\n"
            )
            lines.append(_fence(m.get("content") or ""))
            lines.append("\n")
            continue
        lines.append(f"## {'User' if role == 'user' else 'Assistant'} · #{m.get('seq')} · {when}{marker}\n\n")
        if m.get("reasoning_content"):
            lines.append(f"<details><summary>Reasoning</summary>\n\n{m['reasoning_content']}\n\n</details>\n\n")
        lines.append(_media_line(m.get("media_refs") or []))
        if m.get("content"):
            lines.append(f"{m['content']}\n\n")
        for call in m.get("tool_calls") or []:
            lines.append(f"**Tool call** `{call.get('name')}` ({call.get('id')})\n\n")
            if call.get("raw_arguments") is not None:
                lines.append("Arguments (not a JSON object, sent as-is):\n\n")
                lines.append(_fence(str(call["raw_arguments"])))
            else:
                lines.append(_fence(json.dumps(call.get("arguments"), ensure_ascii=False, indent=2), "json"))
            lines.append("\n")
    return "".join(lines)


# --- validation (pure) --------------------------------------------------------------------------

_ROLES = {c.value for c in Message.Role}
_STATUSES = {c.value for c in Message.CompletionStatus}
# name → (type check, description, default when absent)
_INT = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a non-negative integer")
_OPT_INT = (lambda v: v is None or _INT[0](v), "a non-negative integer or null")
_STR = (lambda v: isinstance(v, str), "a string")
_OPT_STR = (lambda v: v is None or isinstance(v, str), "a string or null")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_LIST = (lambda v: isinstance(v, list), "a list")
_DICT = (lambda v: isinstance(v, dict), "an object")
_ANY = (lambda v: True, "any JSON value")


def _uuid_text(v: Any) -> bool:
    try:
        uuid.UUID(str(v))
    except ValueError:
        return False
    return isinstance(v, str)


_UUID = (_uuid_text, "a UUID string")
_OPT_UUID = (lambda v: v is None or _uuid_text(v), "a UUID string or null")

_DIALOG_CHECKS: dict[str, tuple[tuple[Callable[[Any], bool], str], Any]] = {
    "title": (_STR, "New chat"),
    "title_is_default": (_BOOL, True),
    "created_at": (_INT, None),
    "last_active_at": (_INT, None),
    "message_count": (_INT, None),
    "total_message_count": (_INT, None),
    "state_version": (_INT, 0),
    "history_revision": (_INT, None),
    "usage_input_tokens": (_INT, 0),
    "usage_output_tokens": (_INT, 0),
    "model": (_STR, ""),
    "summary": (_STR, ""),
    "summary_seq": (_INT, 0),
    "auto_compact_failures": (_INT, 0),
    "title_attempted_at": (_INT, 0),
    "deleted_at": (_OPT_INT, None),
    "owner": (_OPT_STR, None),
    "plan": ((lambda v: v is None or (isinstance(v, dict) and "content" in v), "null or {content, updated_at}"), None),
}
_MESSAGE_CHECKS: dict[str, tuple[tuple[Callable[[Any], bool], str], Any]] = {
    "id": (_UUID, None),
    "content": (_STR, ""),
    "reasoning_content": (_OPT_STR, None),
    "provider_state": (_ANY, None),
    "tool_calls": (_LIST, []),
    "tool_call_id": (_OPT_STR, None),
    "tool_name": (_OPT_STR, None),
    "is_error": (_BOOL, False),
    "media_refs": (_LIST, []),
    "turn_id": (_OPT_UUID, None),
    "iteration": (_INT, 0),
    "completion_status": ((lambda v: v in _STATUSES, f"one of {sorted(_STATUSES)}"), "completed"),
    "source": (_DICT, {}),
    "created_at": (_INT, None),
}


def _check_fields(obj: dict, checks: dict, where: str) -> None:
    for name, ((ok, what), _default) in checks.items():
        if name in obj and not ok(obj[name]):
            raise TransferError(f"{where}.{name} must be {what}, got {json.dumps(obj[name])[:60]}")


def _validate_tool_calls(calls: list, where: str) -> None:
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        if not isinstance(call, dict):
            raise TransferError(f"{at} must be an object")
        for key in ("id", "name"):
            if not isinstance(call.get(key), str) or not call[key]:
                raise TransferError(f"{at}.{key} must be a non-empty string")
        if not isinstance(call.get("arguments"), dict):
            raise TransferError(f"{at}.arguments must be an object")
        if "raw_arguments" in call and not isinstance(call["raw_arguments"], str):
            raise TransferError(f"{at}.raw_arguments must be a string")


def validate_document(doc: Any) -> list[dict[str, Any]]:
    """Check an export document; return its dialogs.

    Checks the format and version, each dialog's required fields (``channel``, ``chat_id``,
    ``dialog_id``, ``messages``; ``id`` when present must be the unified id) and the types of the
    optional ones, and each message list: ``seq`` contiguous from 1 in list order, known roles
    and completion statuses, tool calls ``{id, name, arguments}``, unique message ids, and
    ``history_revision`` (when present) equal to the last ``seq``. Raises TransferError naming
    the place (``dialogs[0].messages[3].seq``). Pure.
    """
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise TransferError(f"not a PicoBot export (expected \"format\": \"{EXPORT_FORMAT}\")")
    version = doc.get("version")
    if version != EXPORT_VERSION:
        hint = " (written by a newer PicoBot: upgrade this one)" if isinstance(version, int) and version > 1 else ""
        raise TransferError(f"unsupported export version {version!r}; this PicoBot reads version {EXPORT_VERSION}{hint}")
    dialogs = doc.get("dialogs")
    if not isinstance(dialogs, list):
        raise TransferError("\"dialogs\" must be a list")
    seen_dialogs: set[str] = set()
    seen_messages: set[str] = set()
    for i, d in enumerate(dialogs):
        where = f"dialogs[{i}]"
        if not isinstance(d, dict):
            raise TransferError(f"{where} must be an object")
        for key in ("channel", "chat_id", "dialog_id"):
            if not isinstance(d.get(key), str) or not d[key]:
                raise TransferError(f"{where}.{key} is required (a non-empty string)")
        if ":" in d["channel"] or ":" in d["dialog_id"]:
            raise TransferError(f"{where}: channel and dialog_id cannot contain ':'")
        unified = Dialog.unified_id(d["channel"], d["chat_id"], d["dialog_id"])
        if "id" in d and d["id"] != unified:
            raise TransferError(f"{where}.id {d['id']!r} is not channel:chat_id:dialog_id ({unified!r})")
        if unified in seen_dialogs:
            raise TransferError(f"{where}: dialog {unified!r} appears twice")
        seen_dialogs.add(unified)
        _check_fields(d, _DIALOG_CHECKS, where)
        if len(d.get("title", "x")) > 200:
            raise TransferError(f"{where}.title is longer than 200 characters")
        messages = d.get("messages")
        if not isinstance(messages, list):
            raise TransferError(f"{where}.messages is required (a list)")
        for j, m in enumerate(messages):
            at = f"{where}.messages[{j}]"
            if not isinstance(m, dict):
                raise TransferError(f"{at} must be an object")
            if m.get("seq") != j + 1 or isinstance(m.get("seq"), bool):
                raise TransferError(f"{at}.seq must be {j + 1} (seq is contiguous from 1), got {m.get('seq')!r}")
            if m.get("role") not in _ROLES:
                raise TransferError(f"{at}.role must be one of {sorted(_ROLES)}, got {m.get('role')!r}")
            _check_fields(m, _MESSAGE_CHECKS, at)
            _validate_tool_calls(m.get("tool_calls") or [], at)
            if "id" in m:
                if m["id"] in seen_messages:
                    raise TransferError(f"{at}.id {m['id']!r} appears twice")
                seen_messages.add(m["id"])
        revision = d.get("history_revision")
        if revision is not None and revision != len(messages):
            raise TransferError(f"{where}.history_revision is {revision} but the last seq is {len(messages)}")
        if d.get("summary_seq", 0) > len(messages):
            raise TransferError(f"{where}.summary_seq is above the last seq {len(messages)}")
    return dialogs


# --- import ------------------------------------------------------------------------------------


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
                f"(manage.py createtoken {name}) or import with --user USERNAME"
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
    exist here). A ``cli_chat`` dialog with an owner moves to that owner's chat (its ``chat_id``
    is the owner's user id here, as the WebSocket consumer expects). ``as_new``: new dialog ids
    and message ids (the file can be imported again beside the original); without it an
    existing dialog or message id is an error. Lease and inbox state start empty.

    Raises TransferError (nothing written).
    """
    dialogs = validate_document(doc)
    done: list[ImportedDialog] = []
    owners: dict[str, Any] = {}
    taken: set[str] = set()
    with transaction.atomic():
        for d in dialogs:
            owner = _owner_for(d, user, owners)
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
            fields = {name: d[name] for name in _DIALOG_CHECKS if name in d and name not in ("owner", "plan")}
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
                **scrub_nul(fields),
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
                Plan.objects.create(
                    dialog=dialog, content=scrub_nul(plan["content"]), updated_at=plan.get("updated_at") or now_ms()
                )
            item = ImportedDialog(source_id, unified, len(rows))
            done.append(item)
            if progress is not None:
                progress(item)
    return done


def _message_row(dialog: Dialog, m: dict, as_new: bool) -> Message:
    values = {name: m[name] for name in _MESSAGE_CHECKS if name in m}
    if as_new or "id" not in values:
        values["id"] = uuid.uuid4()
    values.setdefault("created_at", dialog.created_at)
    return Message(dialog=dialog, seq=m["seq"], role=m["role"], **scrub_nul(values))
