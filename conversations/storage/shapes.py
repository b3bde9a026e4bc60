"""Errors and shapes of the storage services: protocol rows, history rows, result records.

Pure data conversion on model instances; no transactions here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conversations.models import Dialog, Message

DEFAULT_TITLE = "New chat"


class StorageError(Exception):
    """Base of the storage errors callers act on."""


class NotFoundError(StorageError):
    """The dialog does not exist, is deleted, or belongs to someone else."""


class InboxFullError(StorageError):
    """The dialog's inbox holds the maximum number of queued messages (seed 000 §6: 32)."""


class LeaseLostError(StorageError):
    """This worker no longer owns the dialog's lease (its epoch is stale; DESIGN §2)."""


# --- shapes ---------------------------------------------------------------------------------------


def scrub_nul(value: Any) -> Any:
    """``value`` with NUL characters replaced by U+FFFD, in strings nested in dicts and lists.

    PostgreSQL text and jsonb cannot store ``\x00``; a model or a user that sends one must not
    make a write fail (and lose the turn). SQLite would take it, but both databases store the same.
    """
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {scrub_nul(k): scrub_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_nul(v) for v in value]
    return value



def _protocol_tool_call(call: object) -> object:
    # ``raw_arguments`` (invalid argument text kept for the model) is server-only: clients get
    # PROTOCOL's ``{id, name, arguments: {…}}``.
    if isinstance(call, dict) and "raw_arguments" in call:
        return {k: v for k, v in call.items() if k != "raw_arguments"}
    return call


def message_to_protocol(row: Message) -> dict:
    """A history row as PROTOCOL §1 "History message" (``provider_state`` and a tool call's
    ``raw_arguments`` never leave)."""
    return {
        "id": str(row.id),
        "seq": row.seq,
        "role": row.role,
        "content": row.content,
        "reasoning": row.reasoning_content,
        "tool_calls": [_protocol_tool_call(c) for c in row.tool_calls or []],
        "tool_call_id": row.tool_call_id,
        "tool_name": row.tool_name,
        "is_error": row.is_error,
        "turn_id": str(row.turn_id) if row.turn_id else None,
        "iteration": row.iteration,
        "completion_status": row.completion_status,
        "created_at": row.created_at,
    }


def message_to_history_row(row: Message) -> dict:
    """A history row for building provider input (includes ``provider_state``; server only)."""
    data = message_to_protocol(row)
    data["provider_state"] = row.provider_state
    data["tool_calls"] = row.tool_calls or []  # with ``raw_arguments``
    data["media_refs"] = row.media_refs or []
    return data


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
    """Result of ``accept_message``: what the ``ack`` frame says."""

    inbox_id: str
    session_id: str
    queued: int
    duplicate: bool


@dataclass
class TurnStart:
    """A turn that just started: its inbox row moved into history (DESIGN §3)."""

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


@dataclass(frozen=True)
class CommitResult:
    """Rows a turn committed (protocol form, ``seq`` order) and the new ``history_revision``."""

    messages: list[dict]
    history_revision: int
