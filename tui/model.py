"""The values the terminal client's store holds (pure; PROTOCOL §1, seed 003 §12).

A ``Dialog`` is one dialog's committed history (paged: ``has_more`` rows above the oldest held)
and its one live turn; a ``Pending`` is a user message sent and not yet in history; a
``SystemLine`` is a notice in the transcript; ``Effects`` is what ``ChatStore.apply`` asks of its
caller. No Textual, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Pending:
    """A user message sent but not yet in history. ``status``: pending (no ack yet), accepted
    (ack'd: durable on the server), failed (an ``error`` frame named its client_msg_id)."""

    client_msg_id: str
    content: str
    session_id: str | None
    status: str = "pending"
    error: str = ""
    message_id: str | None = None
    turn_id: str | None = None  # the turn that answers it, once that turn has started
    queued: int = 0  # messages ahead of it in the dialog (its ``ack``)

    def frame(self) -> dict[str, Any]:
        """The ``message`` frame; the same client_msg_id again is de-duplicated by the server."""
        out: dict[str, Any] = {
            "type": "message",
            "content": self.content,
            "client_msg_id": self.client_msg_id,
        }
        if self.session_id:
            out["session_id"] = self.session_id
        return out


@dataclass
class SystemLine:
    """A notice or command answer shown in the transcript: after the rows of the turn
    ``turn_id`` when it names one that is shown, else after the row with seq ``after_seq``."""

    key: str
    level: str
    text: str
    after_seq: int
    turn_id: str | None = None


@dataclass
class Dialog:
    """One dialog as this client holds it. ``revision`` is the highest committed seq we hold."""

    session_id: str
    loaded: bool = False
    stale: bool = False
    history_requested: bool = False
    revision: int = 0
    behind: int = 0  # the highest history_revision of a commit we could not apply
    messages: list[dict[str, Any]] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    has_more: bool = False  # rows above the oldest held (PROTOCOL ``session_history``)
    older_before: int | None = None  # the before_seq of an older page asked and not answered
    turn: dict[str, Any] | None = None
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)  # turn_id → {status, error}
    lines: list[SystemLine] = field(default_factory=list)


@dataclass
class Effects:
    """What the caller does after ``apply``: ``send`` now, ``seen`` after the next render."""

    send: list[dict[str, Any]] = field(default_factory=list)
    seen: list[dict[str, Any]] = field(default_factory=list)
    changed: bool = False


def error_text(error: Any) -> str:
    """A turn's or outcome's ``error`` (a string, or ``{code, message, ref}``) as one line."""
    if not error:
        return ""
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        text = str(error.get("message") or error.get("code") or "")
        return f"{text} (ref {error['ref']})" if error.get("ref") else text
    return str(error)


def turn_note(turn: dict[str, Any]) -> dict[str, Any]:
    """What a failed or cancelled turn leaves once its snapshot is gone: ``{status, error}``."""
    return {"status": turn.get("status"), "error": error_text(turn.get("error"))}
