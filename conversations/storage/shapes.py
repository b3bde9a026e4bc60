"""Errors and shapes of the storage services: protocol rows, history rows, result records.

Pure data conversion on model instances; no transactions here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from conversations.agent.automated_input import origin_of
from conversations.models import Dialog, InboxMessage, Message
from providers.unicode_text import scrub_value

DEFAULT_TITLE = "New chat"


class StorageError(Exception):
    """Base of the storage errors callers act on."""


class NotFoundError(StorageError):
    """The dialog does not exist, is deleted, or belongs to someone else."""


def shown_ref(ref: str, limit: int = 80) -> str:
    """``ref`` quoted for an error message, cut to ``limit`` characters (a client may send 30 KB)."""
    return repr(ref if len(ref) <= limit else ref[:limit] + "…")


class InboxFullError(StorageError):
    """The dialog's inbox holds the maximum number of queued messages (seed 000 §6: 32)."""


class BudgetExceededError(StorageError):
    """The user's daily token or cost budget is used up (issue 17): the message was not stored.

    ``refusal`` is the ``usage.budget.BudgetRefusal`` (which budget, its reset time, the words).
    """

    def __init__(self, refusal: Any) -> None:
        super().__init__(f"{refusal.message} Your message was not accepted; send it again then.")
        self.refusal = refusal


def refusal_text(exc: InboxFullError | BudgetExceededError) -> str:
    """Why automated input (a scheduled run, a task's notification) was not queued, without the
    advice to a sender ("send it again"): nobody sent it. No final period, no relative time."""
    text = exc.refusal.message if isinstance(exc, BudgetExceededError) else str(exc)
    return re.sub(r" \(in \d+ h \d+ min\)", "", text).rstrip(
        ". "
    )  # kept on rows: no "in 3 h" that goes stale


class LeaseLostError(StorageError):
    """This worker no longer owns the dialog's lease (its epoch is stale; DESIGN §2)."""


# --- shapes ---------------------------------------------------------------------------------------


def scrub_text(value: Any) -> Any:
    """``value`` fit to be stored: in every string, nested in dicts and lists too, NUL characters
    and lone UTF-16 surrogates become U+FFFD and split surrogate pairs are rejoined
    (``providers.unicode_text.scrub_value``). Other values are returned as they are.

    PostgreSQL text and jsonb cannot store ``\x00``, and neither database driver can encode a
    lone surrogate (``json.loads`` makes one of a ``"\\ud800"`` escape): a model, a tool or a user
    that sends one must not make a write fail (and lose the turn). Iterative, so a deeply nested
    value cannot overflow the stack here.
    """
    return scrub_value(value)


PROTOCOL_FIELDS = (
    "id",
    "seq",
    "role",
    "content",
    "reasoning",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "is_error",
    "turn_id",
    "iteration",
    "completion_status",
    "truncated",
    "created_at",
    "outcome",
    "media",
    "origin",
)

TURN_INTERRUPTED_ERROR = "interrupted by a server restart"
"""The error of a turn that died with its process, as its terminal snapshot and history show it."""


def turn_outcome(status: str, outcome: str, error: str) -> dict | None:
    """A user row's ``outcome`` (PROTOCOL §1 "History message") from its inbox row.

    ``status``, ``outcome`` and ``error`` are the ``InboxMessage`` columns of the turn the user
    row started (same id). Returns ``{"status": "failed" | "interrupted" | "cancelled",
    "error": <text>}`` — ``error`` as the turn's terminal snapshot showed it (the presenter's
    words for a failure, the stop reason for a cancel; never a raw provider error) — or None
    when the turn completed, has not ended, or ended before the ``outcome`` column existed.
    An interrupted turn always reads :data:`TURN_INTERRUPTED_ERROR` (older rows stored other
    words for it).
    """
    if status == InboxMessage.Status.INTERRUPTED:
        return {"status": "interrupted", "error": TURN_INTERRUPTED_ERROR}
    if status != InboxMessage.Status.DONE:
        return None
    if outcome in (InboxMessage.Outcome.FAILED, InboxMessage.Outcome.CANCELLED):
        return {"status": str(outcome), "error": error or ""}
    return None


def _protocol_tool_call(call: object) -> object:
    # ``raw_arguments`` (invalid argument text kept for the model) is server-only: clients get
    # PROTOCOL's ``{id, name, arguments: {…}}``.
    if isinstance(call, dict) and "raw_arguments" in call:
        return {k: v for k, v in call.items() if k != "raw_arguments"}
    return call


def media_url(session_id: str, message_id: str, index: int) -> str:
    """The REST path of a user row's ``index``-th image (PROTOCOL §2
    ``GET /api/dialogs/{session_id}/messages/{message_id}/media/{index}``).

    ``session_id`` is percent-encoded whole (its ``:`` too, and a ``/`` a chat id may hold), so
    the path is one segment per parameter in any client; the API decodes it before routing.
    """
    return f"/api/dialogs/{quote(session_id, safe='')}/messages/{message_id}/media/{index}"


def media_list(session_id: str, message_id: str, mime_types: Iterable[str]) -> list[dict]:
    """A user row's ``media`` (PROTOCOL §1 "History message"): ``[{mime_type, url}]`` in
    attachment order, ``url`` from :func:`media_url`; ``[]`` when it has none. Never the data."""
    return [
        {"mime_type": mime_type, "url": media_url(session_id, message_id, index)}
        for index, mime_type in enumerate(mime_types)
    ]


def _mime_types(media_refs: object) -> list[str]:
    # ``media_refs`` items were checked on arrival (``agent.media.validate_media``); only their
    # type is read here, so a row read without the data (``{mime_type}`` items) projects the same.
    if not isinstance(media_refs, list):
        return []
    return [str(m.get("mime_type") or "") for m in media_refs if isinstance(m, dict)]


def history_row_to_protocol(row: dict, *, session_id: str = "", outcome: dict | None = None) -> dict:
    """A history-form row as PROTOCOL §1 "History message".

    Keeps exactly ``PROTOCOL_FIELDS`` (missing ones become None): ``provider_state``,
    ``media_refs`` and anything else server-only are dropped, and each tool call loses its
    ``raw_arguments``. ``outcome`` (``turn_outcome``: the caller read the user row's inbox row)
    is kept on a user row only; every other row, and a user row read without it, has None.
    ``media`` is a user row's images as :func:`media_list` (their types from ``media_refs``,
    whose items need only ``mime_type`` here; URLs under ``session_id``, the row's dialog), and
    ``[]`` on every other row. Never mutates ``row``.
    """
    out = {name: row.get(name) for name in PROTOCOL_FIELDS}
    out["tool_calls"] = [_protocol_tool_call(c) for c in row.get("tool_calls") or []]
    is_user = row.get("role") == Message.Role.USER
    out["outcome"] = outcome if is_user else None
    out["media"] = (
        media_list(session_id, str(row.get("id")), _mime_types(row.get("media_refs"))) if is_user else []
    )
    return out


def message_to_protocol(
    row: Message, *, outcome: dict | None = None, media_types: list[str] | None = None
) -> dict:
    """A history row as PROTOCOL §1 "History message" (``provider_state``, ``media_refs`` and a
    tool call's ``raw_arguments`` never leave): ``history_row_to_protocol`` of its history form, the
    one projection the runtime sessions use too (``conversations.runtime.sessions``).

    ``media_types``: the row's image types when it was read without ``media_refs`` and
    ``provider_state`` (``storage.media.without_media_data``); neither column is touched then, so
    no deferred load runs. None: both are read from ``row``.
    """
    if media_types is None:
        history = message_to_history_row(row)
    else:
        history = _history_fields(row) | {"media_refs": [{"mime_type": t} for t in media_types]}
    return history_row_to_protocol(history, session_id=row.dialog_id, outcome=outcome)


def message_to_history_row(row: Message) -> dict:
    """A history row for building provider input (includes ``provider_state`` and ``media_refs``
    with their data; server only)."""
    return _history_fields(row) | {
        "provider_state": row.provider_state,
        "media_refs": row.media_refs or [],
    }


def _history_fields(row: Message) -> dict:
    """The history form without its two server-only columns (which may be deferred)."""
    return {
        "id": str(row.id),
        "seq": row.seq,
        "role": row.role,
        "content": row.content,
        "reasoning": row.reasoning_content,
        "tool_calls": row.tool_calls or [],  # with ``raw_arguments``
        "tool_call_id": row.tool_call_id,
        "tool_name": row.tool_name,
        "is_error": row.is_error,
        "turn_id": str(row.turn_id) if row.turn_id else None,
        "iteration": row.iteration,
        "completion_status": row.completion_status,
        "truncated": row.truncated,
        "created_at": row.created_at,
        "origin": origin_of(row.source),
    }


def dialog_summary(dialog: Dialog, active_id: str | None) -> dict:
    """One ``sessions`` item (PROTOCOL §1)."""
    return {
        "session_id": dialog.id,
        "dialog_id": dialog.dialog_id,
        "title": dialog.title,
        "last_active_at": dialog.last_active_at,
        "message_count": dialog.message_count,
        "active": dialog.id == active_id,
    }


@dataclass(frozen=True)
class AcceptedMessage:
    """Result of ``accept_message``: what the ``ack`` frame says.

    ``created_dialog``: the dialog was created for this message (first contact, or the idle reset
    of DESIGN §6, then ``replaced_dialog`` is the idle one): announce it and send the welcome.
    """

    inbox_id: str
    session_id: str
    queued: int
    duplicate: bool
    created_dialog: Dialog | None = None
    replaced_dialog: Dialog | None = None


@dataclass
class TurnStart:
    """A turn that just started: its inbox row moved into history (DESIGN §3).

    ``history`` holds history-form rows (``message_to_history_row``) in seq order, the turn's
    user row last: every row with ``seq > summary_seq`` (a full load), or, when
    ``history_is_delta``, only the rows above the caller's ``known_revision`` (seed 004 §5: the
    runtime session holds the rest). ``history_revision`` is the dialog's revision with the user
    row in (= its seq); ``summary``/``summary_seq`` are the dialog's compaction state.
    ``channel_context`` is the inbound message's opaque platform context, for the turn's sink
    (seed 000 §10.1: passed through, never interpreted). ``prefetched`` is what the turn's input
    builder reads, read in the same storage trip as the start (``session_turns.begin_turn``), or
    None: the builder reads it itself. ``model`` is the turn's model preset: the one its message
    asked for, else the dialog's ("" = the default; ``/model``), ``owner_id`` its owner's user pk
    (usage rows; None for an ownerless dialog). ``instructions``: extra system instructions for
    this turn only (an OpenAI-compatible request's system messages; "" = none).
    """

    dialog_id: str
    channel: str
    chat_id: str
    title: str
    inbox_id: str
    turn_id: str
    reply_message_id: str
    user_message: dict
    history: list[dict] = field(default_factory=list)
    summary: str = ""
    summary_seq: int = 0
    history_revision: int = 0
    history_is_delta: bool = False
    channel_context: dict = field(default_factory=dict)
    prefetched: dict | None = None
    model: str = ""
    owner_id: int | None = None
    instructions: str = ""


@dataclass(frozen=True)
class CommitResult:
    """Rows a turn committed (protocol form, ``seq`` order) and the new ``history_revision``.

    ``history_rows``: the rows this commit created (not the turn's user row, which entered history
    at turn start), in history form and seq order, as a DB read would return them: the runtime
    session appends them without reading them back (seed 004 §5.2).
    """

    messages: list[dict]
    history_revision: int
    history_rows: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class HistorySnapshot:
    """A dialog's full history state for a runtime session (``load_history``; seed 004 §5.1).

    ``history``: every row with ``seq > summary_seq``, history form, seq order;
    ``history_revision``: the dialog's highest committed seq.
    """

    dialog_id: str
    title: str
    summary: str
    summary_seq: int
    history_revision: int
    history: list[dict]
