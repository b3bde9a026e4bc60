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

An import is exact or refused whole (README): :func:`load_json` reads standard JSON only (no
``NaN``/``Infinity``, no number a float cannot hold, no key twice in an object), and
:func:`validate_document` refuses, naming the place, anything the database would change or the app
would not have written: NUL characters and lone surrogates anywhere (PostgreSQL cannot store the
first; the app replaces it with U+FFFD on its own writes, so no export holds one), non-finite
numbers, unknown fields, values outside the columns, ``media_refs`` other than the images a user
message can carry (``conversations.agent.media``).

Titles are taken as the app could have stored them, not by today's ``/rename`` rules: a
non-empty line of at most 200 characters without leading, trailing or repeated whitespace (every
title path of every version collapses whitespace). Generated titles were stored without the
rename check, so existing databases hold titles with control or private-use characters (ESC, BEL,
U+E000); refusing them would refuse the app's own export, so they are imported as they are.

Pure parts (no DB): :func:`load_json`, :func:`validate_document`, :func:`markdown_dialog`. The
rest reads or writes the DB; :func:`import_document` runs in one transaction (all or nothing).
"""

from __future__ import annotations

import io
import json
import math
import secrets
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import QuerySet

from conversations.agent.media import MediaError, validate_media
from conversations.models import Dialog, Message, Plan, now_ms

EXPORT_FORMAT = "picobot-export"
EXPORT_VERSION = 1
# cli_chat chats are per user: their chat_id is the owner's user id (conversations.chat.consumer).
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
    """``text`` verbatim in a fenced code block whose fence is longer than any backtick run in it:
    no line of ``text`` can close it, and nothing inside is read as Markdown or HTML."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}\n"


_MD_PUNCTUATION = "\\`*_[]!#|~:+-"  # with <, >, & as entities: no emphasis, link, image, heading, autolink
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}


def _inline(value: object) -> str:
    """A value shown inside a line (title, owner, tool names and ids): one line, with HTML and
    Markdown syntax escaped, so it can neither start a heading or a speaker turn nor inject HTML,
    links or images."""
    text = " ".join(str(value).split())
    return "".join(_HTML.get(c, "\\" + c if c in _MD_PUNCTUATION else c) for c in text)


def _media_line(media: list) -> str:
    parts = []
    for item in media:
        if isinstance(item, dict):
            size = len(str(item.get("data", ""))) * 3 // 4
            parts.append(f"{_inline(item.get('mime_type', 'file'))}, {size // 1024 or 1} KiB")
    return f"*\\[{len(parts)} attachment(s): {'; '.join(parts)}\\]*\n\n" if parts else ""


def _details(summary: str, text: str) -> str:
    """A collapsible block; its text fenced, so a ``</details>`` inside cannot close it early."""
    return f"<details><summary>{summary}</summary>\n\n{_fence(text, 'text')}\n</details>\n\n"


def markdown_dialog(item: dict[str, Any]) -> str:
    """A readable transcript of one export dict (pure).

    Message contents, reasoning, summaries, tool arguments and results are shown verbatim in
    fenced code blocks (fences longer than any backtick run inside), so no content can forge a
    heading or a speaker turn, inject HTML or close a ``<details>`` block; the title and other
    values inside lines are made single-line and escaped. Reasoning goes into a collapsible
    ``<details>``; ``provider_state`` and media data are left out.
    """
    lines = [f"# {_inline(item.get('title') or 'Untitled')}\n\n"]
    deleted = f" · deleted {ms_to_text(item.get('deleted_at'))}" if item.get("deleted_at") else ""
    lines.append(
        f"{_inline(item.get('id'))} · owner {_inline(item.get('owner') or '—')} · "
        f"created {ms_to_text(item.get('created_at'))} · last active {ms_to_text(item.get('last_active_at'))} · "
        f"{len(item.get('messages', []))} messages{deleted}\n\n"
    )
    if item.get("summary"):
        lines.append(_details(f"Summary of messages 1–{_inline(item.get('summary_seq'))}", str(item["summary"])))
    for m in item.get("messages", []):
        role = m.get("role")
        status = m.get("completion_status")
        marker = "" if status in (None, "completed") else f" · *{_inline(status)}*"
        when = ms_to_text(m.get("created_at"))
        seq = _inline(m.get("seq"))
        if role == "tool":
            error = " · **error**" if m.get("is_error") else ""
            lines.append(
                f"#### Tool result {_inline(m.get('tool_name') or '?')} ({_inline(m.get('tool_call_id') or '?')})"
                f" · \\#{seq} · {when}{error}{marker}\n\n"
            )
            lines.append(_fence(str(m.get("content") or ""), "text"))
            lines.append("\n")
            continue
        lines.append(f"## {'User' if role == 'user' else 'Assistant'} · \\#{seq} · {when}{marker}\n\n")
        if m.get("reasoning_content"):
            lines.append(_details("Reasoning", str(m["reasoning_content"])))
        lines.append(_media_line(m.get("media_refs") or []))
        if m.get("content"):
            lines.append(_fence(str(m["content"]), "text"))
            lines.append("\n")
        for call in m.get("tool_calls") or []:
            lines.append(f"**Tool call** {_inline(call.get('name'))} ({_inline(call.get('id'))})\n\n")
            if call.get("raw_arguments") is not None:
                lines.append("Arguments (not a JSON object, sent as-is):\n\n")
                lines.append(_fence(str(call["raw_arguments"])))
            else:
                lines.append(_fence(json.dumps(call.get("arguments"), ensure_ascii=False, indent=2), "json"))
            lines.append("\n")
    return "".join(lines)


# --- reading (pure) -----------------------------------------------------------------------------


class _NotStandardJSONError(ValueError):
    """Raised from inside ``json.load`` hooks; :func:`load_json` turns it into TransferError."""


def _refuse_constant(name: str) -> Any:
    raise _NotStandardJSONError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStandardJSONError(f"the number {text[:40]} is too large for a float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise _NotStandardJSONError(f"the key {_shown(twice)} appears twice in one object")
    return obj


def load_json(stream: IO[str]) -> Any:
    """The JSON document read from ``stream``, strictly (what ``json.load`` would otherwise bend).

    Raises TransferError, its message to follow the file's name: ``is not JSON: …`` (a syntax or
    encoding error), ``is not standard JSON: …`` (``NaN``, ``Infinity``, ``-Infinity``, a number
    beyond a float or with more digits than Python converts, a key twice in one object: ``json``
    would read the first three as floats no database column takes and keep only the last of the
    duplicates) or ``nests JSON too deeply``. Pure (reads only ``stream``).
    """
    try:
        return json.load(
            stream, parse_constant=_refuse_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
        )
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TransferError(f"is not JSON: {exc}") from None
    except ValueError as exc:  # ours, or int()'s digit limit (its text suggests a Python setting)
        said = str(exc)
        if "int_max_str_digits" in said or "Exceeds the limit" in said:
            said = "an integer has more digits than any column holds"
        raise TransferError(f"is not standard JSON: {said}") from None
    except RecursionError:
        raise TransferError("nests JSON too deeply") from None


def loads_strict(text: str) -> Any:
    """:func:`load_json` for a string (the admin's JSON fields take the import's rules).

    Raises TransferError (``is not JSON: …`` / ``is not standard JSON: …`` / too deep).
    """
    return load_json(io.StringIO(text))


# --- validation (pure) --------------------------------------------------------------------------

_ROLES = {c.value for c in Message.Role}
_STATUSES = {c.value for c in Message.CompletionStatus}
Check = tuple[Callable[[Any], bool], str]

MAX_TOOL_ID_CHARS = 512
"""Bound of a message's ``tool_call_id``/``tool_name`` and of a tool call's ``id``/``name`` (model
generated, stored as text: an import must not bring in megabytes of them)."""
MAX_JSON_DEPTH = 100
"""Nesting bound of the whole document: deeper JSON is no export (and would overflow the stack)."""
MAX_OWNER_CHARS = 150
MAX_TITLE_CHARS = Dialog._meta.get_field("title").max_length
# The keys an export has; anything else is refused (a misspelt field is never silently dropped).
DOCUMENT_KEYS = frozenset({"format", "version", "exported_at", "dialogs"})
DIALOG_KEYS = frozenset({*DIALOG_FIELDS, "owner", "plan", "messages"})
MESSAGE_KEYS = frozenset(MESSAGE_FIELDS)
TOOL_CALL_KEYS = frozenset({"id", "name", "arguments", "raw_arguments"})
PLAN_KEYS = frozenset({"content", "updated_at"})
MEDIA_KEYS = frozenset({"mime_type", "data"})


def _int_check(model: type, name: str, *, nullable: bool = False) -> Check:
    """An integer the column can hold (its range on every supported database, never negative)."""
    kind = model._meta.get_field(name).get_internal_type()
    low, high = BaseDatabaseOperations.integer_field_ranges.get(kind, (0, 2**63 - 1))
    low = max(low, 0)

    def ok(v: Any) -> bool:
        return (nullable and v is None) or (isinstance(v, int) and not isinstance(v, bool) and low <= v <= high)

    return ok, f"an integer from {low} to {high}" + (" or null" if nullable else "")


def _str_check(max_chars: int | None = None, *, nullable: bool = False) -> Check:
    def ok(v: Any) -> bool:
        return (nullable and v is None) or (isinstance(v, str) and (max_chars is None or len(v) <= max_chars))

    bound = f" of at most {max_chars} characters" if max_chars is not None else ""
    return ok, f"a string{bound}" + (" or null" if nullable else "")


def _uuid_text(v: Any) -> bool:
    """A UUID in its canonical form (lowercase, hyphenated: what the export writes)."""
    if not isinstance(v, str):
        return False
    try:
        return str(uuid.UUID(v)) == v
    except ValueError:
        return False


_BOOL: Check = (lambda v: isinstance(v, bool), "true or false")
_LIST: Check = (lambda v: isinstance(v, list), "a list")
_DICT: Check = (lambda v: isinstance(v, dict), "an object")
_ANY: Check = (lambda v: True, "any JSON value")
_UUID: Check = (_uuid_text, "a UUID string in canonical form (e.g. 3f2b…-…, lowercase)")
_OPT_UUID: Check = (lambda v: v is None or _uuid_text(v), "a UUID string in canonical form, or null")
_TITLE: Check = (lambda v: isinstance(v, str), "a string")

_DIALOG_CHECKS: dict[str, tuple[Check, Any]] = {
    "title": (_TITLE, "New chat"),
    "title_is_default": (_BOOL, True),
    "created_at": (_int_check(Dialog, "created_at"), None),
    "last_active_at": (_int_check(Dialog, "last_active_at"), None),
    "message_count": (_int_check(Dialog, "message_count"), None),
    "total_message_count": (_int_check(Dialog, "total_message_count"), None),
    "state_version": (_int_check(Dialog, "state_version"), 0),
    "history_revision": (_int_check(Dialog, "history_revision"), None),
    "usage_input_tokens": (_int_check(Dialog, "usage_input_tokens"), 0),
    "usage_output_tokens": (_int_check(Dialog, "usage_output_tokens"), 0),
    "model": (_str_check(Dialog._meta.get_field("model").max_length), ""),
    "summary": (_str_check(), ""),
    "summary_seq": (_int_check(Dialog, "summary_seq"), 0),
    "auto_compact_failures": (_int_check(Dialog, "auto_compact_failures"), 0),
    "title_attempted_at": (_int_check(Dialog, "title_attempted_at"), 0),
    "deleted_at": (_int_check(Dialog, "deleted_at", nullable=True), None),
    "owner": (_str_check(MAX_OWNER_CHARS, nullable=True), None),
    "plan": ((lambda v: v is None or isinstance(v, dict), "null or {content, updated_at}"), None),
}
_MESSAGE_CHECKS: dict[str, tuple[Check, Any]] = {
    "id": (_UUID, None),
    "content": (_str_check(), ""),
    "reasoning_content": (_str_check(nullable=True), None),
    "provider_state": (_ANY, None),
    "tool_calls": (_LIST, []),
    "tool_call_id": (_str_check(MAX_TOOL_ID_CHARS, nullable=True), None),
    "tool_name": (_str_check(MAX_TOOL_ID_CHARS, nullable=True), None),
    "is_error": (_BOOL, False),
    "media_refs": (_LIST, []),
    "turn_id": (_OPT_UUID, None),
    "iteration": (_int_check(Message, "iteration"), 0),
    "completion_status": ((lambda v: v in _STATUSES, f"one of {sorted(_STATUSES)}"), "completed"),
    "source": (_DICT, {}),
    "created_at": (_int_check(Message, "created_at"), None),
}
# Dialog key parts: required, printable, no ':' in channel and dialog_id, the model's lengths.
_KEY_PARTS = {name: Dialog._meta.get_field(name).max_length for name in ("channel", "chat_id", "dialog_id")}


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: shown as its escape, never raw (unencodable)
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def _check_fields(obj: dict, checks: dict, where: str) -> None:
    for name, ((ok, what), _default) in checks.items():
        if name in obj and not ok(obj[name]):
            raise TransferError(f"{where}.{name} must be {what}, got {_shown(obj[name])}")


def _check_keys(obj: dict, allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        listed = ", ".join(repr(k[:40]) for k in unknown[:3]) + (" …" if len(unknown) > 3 else "")
        raise TransferError(f"{where} has unknown field(s) {listed} (this PicoBot reads version {EXPORT_VERSION})")


def _path(where: tuple | None) -> str:
    """``dialogs[0].messages[3].content`` from a ``(parent, key)`` chain (``None`` is the root)."""
    keys: list[Any] = []
    while where is not None:
        where, key = where
        keys.append(key)
    text = ""
    for key in reversed(keys):
        if isinstance(key, int):
            text += f"[{key}]"
        elif key.isidentifier():
            text += f".{key}" if text else key
        else:
            text += f"[{_shown(key)}]"
    return text or "the document"


def _value_problem(value: Any) -> str | None:
    """Why a JSON scalar cannot be imported exactly, or None when it can."""
    if isinstance(value, str):
        if "\x00" in value:
            return "holds a NUL character (\\u0000), which the database cannot store"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"is not valid Unicode (a lone surrogate): {_shown(value)}"
    elif isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    return None


def check_storable_json(doc: Any) -> None:
    """Every value: nested at most ``MAX_JSON_DEPTH`` deep, every string (keys too) storable as
    it is (no NUL, no lone surrogate), every number finite. Raises TransferError naming the place
    (``dialogs[0].messages[3].content: holds a NUL character …``). Iterative, so a hostile
    document cannot overflow the stack here. The import's rule, also the admin's JSON fields'."""
    stack: list[tuple[Any, int, tuple | None]] = [(doc, 0, None)]
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise TransferError(f"the document nests deeper than {MAX_JSON_DEPTH} levels: it is not an export")
        if isinstance(value, dict):
            for key, item in value.items():
                problem = _value_problem(key)
                if problem is not None:
                    raise TransferError(f"{_path(where)}: a key {problem}")
                stack.append((item, depth + 1, (where, key)))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, (where, k)) for k, item in enumerate(value))
        else:
            problem = _value_problem(value)
            if problem is not None:
                raise TransferError(f"{_path(where)}: {problem}")


def _validate_tool_calls(calls: list, where: str) -> None:
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        if not isinstance(call, dict):
            raise TransferError(f"{at} must be an object")
        _check_keys(call, TOOL_CALL_KEYS, at)
        for key in ("id", "name"):
            value = call.get(key)
            if not isinstance(value, str) or not value or len(value) > MAX_TOOL_ID_CHARS:
                raise TransferError(f"{at}.{key} must be a non-empty string of at most {MAX_TOOL_ID_CHARS} characters")
        if not isinstance(call.get("arguments"), dict):
            raise TransferError(f"{at}.arguments must be an object")
        if "raw_arguments" in call and not isinstance(call["raw_arguments"], str):
            raise TransferError(f"{at}.raw_arguments must be a string")


def clean_plan_content(content: Any) -> dict:
    """A plan's ``content`` checked with the plan tool's own rules (``conversations.tools.plan``:
    its parameter schema, then ``clean_plan``); returns what the tool would store. ``{}`` (no
    plan) stays ``{}``. Raises ValueError saying what is wrong. Used by ``import`` and the admin:
    a plan the tool could not have written never reaches a turn."""
    from conversations.tools.plan import clean_plan, plan_tools
    from conversations.tools.registry import ToolError, validate_arguments

    if content == {}:
        return {}
    if not isinstance(content, dict):
        raise ValueError("a plan is an object {\"steps\": [{\"text\", \"status\"}, …], \"note\": …}")
    schema = next(tool.parameters for tool in plan_tools() if tool.name == "plan_update")
    problem = validate_arguments(schema, content)
    if problem is not None:
        raise ValueError(f"not a plan the plan tool could write: {problem}")
    try:
        return clean_plan(content["steps"], content.get("note", ""))
    except ToolError as exc:
        raise ValueError(str(exc)) from None


def _validate_plan(plan: dict, where: str) -> None:
    _check_keys(plan, PLAN_KEYS, where)
    if "content" not in plan:
        raise TransferError(f"{where}.content is required")
    try:
        clean_plan_content(plan["content"])
    except ValueError as exc:
        raise TransferError(f"{where}.content: {exc}") from None
    ok, what = _int_check(Plan, "updated_at", nullable=True)
    if not ok(plan.get("updated_at")):
        raise TransferError(f"{where}.updated_at must be {what}, got {_shown(plan.get('updated_at'))}")


def _validate_title(d: dict, where: str) -> None:
    """A title as the app could have stored it (module docstring): not today's rename rules,
    which refuse the control and private-use characters generated titles hold."""
    if "title" not in d:
        return
    title = d["title"]
    if not isinstance(title, str) or not title or len(title) > MAX_TITLE_CHARS:
        raise TransferError(f"{where}.title must be a non-empty string of at most {MAX_TITLE_CHARS} characters")
    if " ".join(title.split()) != title:
        raise TransferError(f"{where}.title must be one line, without leading, trailing or repeated whitespace")


def _validate_media(m: dict, where: str) -> None:
    """``media_refs`` as the app writes them: only on user messages, each item exactly
    ``{mime_type, data}`` as ``conversations.agent.media.validate_media`` accepts a message's media
    (PNG, JPEG, GIF or WebP whose bytes match, base64, at most 8 items and 5 MiB in all)."""
    media = m.get("media_refs") or []
    at = f"{where}.media_refs"
    if media and m["role"] != Message.Role.USER:
        raise TransferError(f"{at}: only user messages carry media (this one is {m['role']!r})")
    for k, item in enumerate(media):
        if isinstance(item, dict):
            _check_keys(item, MEDIA_KEYS, f"{at}[{k}]")
    try:
        validate_media(media)
    except MediaError as exc:
        text = str(exc)  # "media[0].mime_type must be …" or "media exceed 5 MiB in all"
        raise TransferError(f"{at}{text[len('media'):]}" if text.startswith("media[") else f"{at}: {text}") from None


def validate_document(doc: Any) -> list[dict[str, Any]]:
    """Check an export document; return its dialogs.

    Checks the format and version; no field beyond those an export writes (at every level); each
    dialog's required key parts (``channel`` ≤ 32, ``chat_id`` ≤ 128, ``dialog_id`` ≤ 64
    characters, printable; ``id`` when present must be the unified id), the types and ranges of
    the optional fields (integers the column holds, ``model`` ≤ 200 characters, the title as the
    app could have stored it, the plan by the plan tool's rules), and each message list: ``seq``
    contiguous from 1 in list order, known roles and completion statuses, canonical UUIDs, tool
    calls ``{id, name, arguments}`` (ids and names ≤ 512 characters), ``media_refs`` as a user
    message's images, unique message ids, and ``history_revision`` (when present) equal to the
    last ``seq``. Everywhere: no NUL, no lone surrogate, no non-finite number, nesting ≤ 100.
    Raises TransferError naming the place (``dialogs[0].messages[3].seq``). Pure.
    """
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise TransferError(f"not a PicoBot export (expected \"format\": \"{EXPORT_FORMAT}\")")
    version = doc.get("version")
    if version != EXPORT_VERSION or isinstance(version, bool):
        hint = " (written by a newer PicoBot: upgrade this one)" if isinstance(version, int) and version > 1 else ""
        raise TransferError(f"unsupported export version {_shown(version)}; this PicoBot reads version {EXPORT_VERSION}{hint}")
    _check_keys(doc, DOCUMENT_KEYS, "the document")
    check_storable_json(doc)
    if "exported_at" in doc and not _int_check(Dialog, "created_at")[0](doc["exported_at"]):
        raise TransferError("\"exported_at\" must be an integer (ms since the epoch)")
    dialogs = doc.get("dialogs")
    if not isinstance(dialogs, list):
        raise TransferError("\"dialogs\" must be a list")
    seen_dialogs: set[str] = set()
    seen_messages: set[str] = set()
    for i, d in enumerate(dialogs):
        where = f"dialogs[{i}]"
        if not isinstance(d, dict):
            raise TransferError(f"{where} must be an object")
        for key, limit in _KEY_PARTS.items():
            value = d.get(key)
            if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
                verb = "is required" if value is None else "must be"
                raise TransferError(f"{where}.{key} {verb} (a non-empty printable string of at most {limit} characters)")
        if ":" in d["channel"] or ":" in d["dialog_id"]:
            raise TransferError(f"{where}: channel and dialog_id cannot contain ':'")
        _check_keys(d, DIALOG_KEYS, where)
        unified = Dialog.unified_id(d["channel"], d["chat_id"], d["dialog_id"])
        if "id" in d and d["id"] != unified:
            raise TransferError(f"{where}.id {_shown(d['id'])} is not channel:chat_id:dialog_id ({unified!r})")
        if unified in seen_dialogs:
            raise TransferError(f"{where}: dialog {unified!r} appears twice")
        seen_dialogs.add(unified)
        _check_fields(d, _DIALOG_CHECKS, where)
        _validate_title(d, where)
        if d.get("plan") is not None:
            _validate_plan(d["plan"], f"{where}.plan")
        messages = d.get("messages")
        if not isinstance(messages, list):
            raise TransferError(f"{where}.messages is required (a list)")
        for j, m in enumerate(messages):
            at = f"{where}.messages[{j}]"
            if not isinstance(m, dict):
                raise TransferError(f"{at} must be an object")
            if type(m.get("seq")) is not int or m["seq"] != j + 1:  # not 1.0, not true
                raise TransferError(f"{at}.seq must be {j + 1} (seq is contiguous from 1), got {_shown(m.get('seq'))}")
            if m.get("role") not in _ROLES:
                raise TransferError(f"{at}.role must be one of {sorted(_ROLES)}, got {_shown(m.get('role'))}")
            _check_keys(m, MESSAGE_KEYS, at)
            _check_fields(m, _MESSAGE_CHECKS, at)
            _validate_tool_calls(m.get("tool_calls") or [], at)
            _validate_media(m, at)
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
                    dialog=dialog, content=clean_plan_content(plan["content"]),
                    updated_at=now_ms() if updated_at is None else updated_at,
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
    return Message(dialog=dialog, seq=m["seq"], role=m["role"], **values)
