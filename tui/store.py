"""What the terminal client knows of the chat: pure protocol state (PROTOCOL §1, seed 003 §12).

``ChatStore.apply(frame)`` takes one decoded server frame and returns :class:`Effects`: frames to
send now (``history`` on a gap, ``sessions``, pending messages after ``ready``) and ``seen``
credits to send once the UI has drawn the snapshots. Per dialog the client holds the committed
``history`` and one ``active_turn``, replaced only by a higher revision of the same turn (or by a
new turn), never rebuilt from deltas. No Textual, no I/O: tests drive it with plain dicts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

TERMINAL = frozenset({"completed", "cancelled", "failed"})
NOTICE_MEMORY = 200  # notification ids remembered for de-duplication (a retried send)


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
    turn_id: str | None = None

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
    """A notice or command answer shown in the transcript, after the row with seq ``after_seq``."""

    key: str
    level: str
    text: str
    after_seq: int


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
    has_more: bool = False
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


class ChatStore:
    """The chat of the authenticated user: dialogs, the active one, pending messages, notices."""

    def __init__(self) -> None:
        self.user = ""
        self.provider: dict[str, Any] = {}
        self.active_session_id: str | None = None
        self.dialogs: dict[str, Dialog] = {}
        self.items: list[dict[str, Any]] = []  # the `sessions` list, most recent first
        self.pending: list[Pending] = []
        self.loose_lines: list[SystemLine] = []  # notices that arrived before any dialog
        self.finished_turns: set[str] = set()  # turns whose rows are committed
        self.sessions_answers_due = 0  # typed /sessions whose answer goes to the transcript
        self._notice_ids: list[str] = []
        self._line_counter = 0

    # --- queries ----------------------------------------------------------------------------

    def dialog(self, session_id: str) -> Dialog:
        """The dialog ``session_id``, created empty (not loaded) on first use."""
        if session_id not in self.dialogs:
            self.dialogs[session_id] = Dialog(session_id)
        return self.dialogs[session_id]

    @property
    def active(self) -> Dialog | None:
        return self.dialog(self.active_session_id) if self.active_session_id else None

    @property
    def active_title(self) -> str:
        item = next((i for i in self.items if i.get("session_id") == self.active_session_id), None)
        return str(item.get("title") or "") if item else ""

    def running_turn(self) -> dict[str, Any] | None:
        """The active dialog's live turn while it runs, else None."""
        d = self.active
        if d and d.turn and d.turn.get("status") not in TERMINAL:
            return d.turn
        return None

    # --- client → server --------------------------------------------------------------------

    def send_text(self, text: str) -> dict[str, Any]:
        """The frame for what the user typed: a slash command (no pending bookkeeping: commands
        get no ``ack``) or a user message recorded as pending, to the active dialog."""
        if text.lstrip().startswith("/"):
            if text.split()[0] == "/sessions":
                self.sessions_answers_due += 1
            out: dict[str, Any] = {"type": "message", "content": text}
            if self.active_session_id:
                out["session_id"] = self.active_session_id
            return out
        p = Pending(str(uuid.uuid4()), text, self.active_session_id)
        self.pending.append(p)
        return p.frame()

    def stop_frame(self) -> dict[str, Any] | None:
        """``stop`` for the turn the active dialog shows running, naming it (PROTOCOL: a repeated
        stop never cancels the next queued turn); None when nothing runs."""
        turn = self.running_turn()
        if turn is None:
            return None
        return {"type": "stop", "session_id": turn["session_id"], "turn_id": turn["id"]}

    # --- server → client --------------------------------------------------------------------

    def apply(self, frame: dict[str, Any]) -> Effects:
        """Apply one server frame; unknown types change nothing (the server may add some)."""
        fx = Effects()
        handler = getattr(self, f"_on_{frame.get('type')}", None)
        if handler is not None:
            handler(frame, fx)
        return fx

    def _on_ready(self, f: dict[str, Any], fx: Effects) -> None:
        self.user = str(f.get("user") or "")
        self.provider = f.get("provider") or {}
        running = [t for t in f.get("running") or [] if isinstance(t, dict)]
        running_ids = {t.get("id") for t in running}
        # Whatever we hold may be behind after a reconnect: refetch lazily, and forget live turns
        # that ended while we were away (their rows come with the history).
        for d in self.dialogs.values():
            d.stale, d.history_requested = True, False
            if d.turn and d.turn.get("status") not in TERMINAL and d.turn.get("id") not in running_ids:
                d.turn = None
        self._activate(f.get("active_session_id"), fx)
        for turn in running:
            self._apply_turn(turn, fx)
        fx.send.append({"type": "sessions"})
        fx.send.extend(p.frame() for p in self.pending if p.status == "pending")
        fx.changed = True

    def _on_ack(self, f: dict[str, Any], fx: Effects) -> None:
        p = next((x for x in self.pending if x.client_msg_id == f.get("client_msg_id")), None)
        if p is None:
            return
        p.status, p.message_id = "accepted", f.get("message_id")
        p.session_id = f.get("session_id") or p.session_id
        if p.session_id and p.message_id in self.dialog(p.session_id).ids:
            self.pending.remove(p)
        fx.changed = True

    def _on_turn_updated(self, f: dict[str, Any], fx: Effects) -> None:
        if isinstance(f.get("turn"), dict):
            self._apply_turn(f["turn"], fx)

    def _on_turn_committed(self, f: dict[str, Any], fx: Effects) -> None:
        """The seq rule (PROTOCOL ``turn_committed``): apply when the first row's seq ≤ our
        revision + 1, skipping rows we hold; otherwise a gap → one ``history`` request."""
        d = self.dialog(str(f.get("session_id")))
        rows = sorted((r for r in f.get("messages") or [] if isinstance(r, dict)), key=lambda r: r["seq"])
        if not rows:
            return
        self._settle_turns(d, rows)
        for row in rows:
            if row.get("role") == "user":
                self._match_pending(d.session_id, row, by_content=True)
        if d.loaded and rows[0]["seq"] <= d.revision + 1:
            self._merge(d, rows)
            d.revision = max(d.revision, int(f.get("history_revision") or 0), rows[-1]["seq"])
        else:
            d.stale = True
            d.behind = max(d.behind, int(f.get("history_revision") or 0), rows[-1]["seq"])
            if d.session_id == self.active_session_id and not d.history_requested:
                self._request_history(d, fx)
        fx.changed = True

    def _on_session_history(self, f: dict[str, Any], fx: Effects) -> None:
        d = self.dialog(str(f.get("session_id")))
        rows = sorted((r for r in f.get("messages") or [] if isinstance(r, dict)), key=lambda r: r["seq"])
        revision = int(f.get("history_revision") or 0)
        if d.loaded and revision < d.revision:
            self._merge(d, rows)  # computed before a commit we already applied: keep the newer rows
        else:
            d.messages, d.ids, d.revision = rows, {r["id"] for r in rows}, revision
            d.has_more = bool(f.get("has_more"))
        d.loaded, d.stale, d.history_requested = True, False, False
        if d.revision < d.behind:
            self._request_history(d, fx)  # answered before a commit we could not apply: again
        d.behind = 0
        for row in rows:
            if row.get("role") == "user":
                self._match_pending(d.session_id, row, by_content=False)
        self._settle_turns(d, rows)
        fx.changed = True

    def _on_sessions(self, f: dict[str, Any], fx: Effects) -> None:
        self.items = [i for i in f.get("items") or [] if isinstance(i, dict)]
        if self.sessions_answers_due:
            self.sessions_answers_due -= 1
            listing = "\n".join(
                f"{'▶' if i.get('active') else ' '} {i.get('dialog_id')}  {i.get('title') or '(untitled)'}"
                f"  ({i.get('message_count', 0)} messages)"
                for i in self.items
            )
            self._add_line("info", "Your dialogs (/switch <id>):\n" + (listing or "none"), None)
        active = next((i for i in self.items if i.get("active")), None)
        if active and active.get("session_id") != self.active_session_id:
            self._activate(active.get("session_id"), fx)
        fx.changed = True

    def _on_session_changed(self, f: dict[str, Any], fx: Effects) -> None:
        sid = f.get("session_id")
        if f.get("deleted"):
            self.items = [i for i in self.items if i.get("session_id") != sid]
            self.dialogs.pop(sid, None)
            if sid == self.active_session_id:
                self.active_session_id = None
            fx.changed = True
            return
        item = next((i for i in self.items if i.get("session_id") == sid), None)
        if item is None:
            item = {"session_id": sid, "message_count": 0}
            self.items.insert(0, item)
        item.update(dialog_id=f.get("dialog_id"), title=f.get("title"), active=bool(f.get("active")))
        if f.get("active"):
            for other in self.items:
                other["active"] = other is item
            self._activate(sid, fx)
        fx.changed = True

    def _on_notification(self, f: dict[str, Any], fx: Effects) -> None:
        notice_id = f.get("id")
        if notice_id:
            if notice_id in self._notice_ids:
                return  # a retried send: show it once
            self._notice_ids = [*self._notice_ids[-NOTICE_MEMORY + 1 :], notice_id]
        if f.get("turn_id") in self.finished_turns:
            return  # a plain fallback after the turn's final: never shown on cli_chat
        self._add_line(str(f.get("level") or "info"), str(f.get("content") or ""), f.get("session_id"))
        fx.changed = True

    def _on_error(self, f: dict[str, Any], fx: Effects) -> None:
        text = str(f.get("message") or f.get("code") or "error")
        if f.get("ref"):
            text += f" (ref {f['ref']})"
        p = next(
            (x for x in self.pending if f.get("client_msg_id") and x.client_msg_id == f["client_msg_id"]),
            None,
        )
        if p is not None:
            p.status, p.error = "failed", text
        else:
            self._add_line("error", text, None)
        fx.changed = True

    # --- internals ----------------------------------------------------------------------------

    def _activate(self, session_id: str | None, fx: Effects) -> None:
        if not session_id:
            return
        self.active_session_id = session_id
        d = self.dialog(session_id)
        if (not d.loaded or d.stale) and not d.history_requested:
            self._request_history(d, fx)
        fx.changed = True

    def _request_history(self, d: Dialog, fx: Effects) -> None:
        d.history_requested = True
        fx.send.append({"type": "history", "session_id": d.session_id})

    def _apply_turn(self, t: dict[str, Any], fx: Effects) -> None:
        """Seed 003 §12: the active turn is replaced only by a higher revision (or a new turn)."""
        if not t.get("id") or not t.get("session_id"):
            return
        d = self.dialog(t["session_id"])
        if t["id"] in self.finished_turns:
            # Its rows are committed (turn_committed may precede the terminal snapshot): keep
            # only the outcome so a failure stays visible under those rows.
            if t.get("status") in ("failed", "cancelled"):
                d.notes[t["id"]] = _note(t)
            fx.changed = True
            return
        cur = d.turn
        if cur and cur.get("id") == t["id"] and int(t.get("revision") or 0) <= int(cur.get("revision") or 0):
            return
        if cur is None or cur.get("id") != t["id"]:
            if cur and cur.get("status") in ("failed", "cancelled"):
                d.notes[cur["id"]] = _note(cur)
            p = next(
                (x for x in self._pending_of(d.session_id) if not x.turn_id and x.status != "failed"), None
            )
            if p is not None:
                p.turn_id = t["id"]
        d.turn = t
        if t.get("status") == "running":
            fx.seen.append({"type": "seen", "turn_id": t["id"], "revision": t.get("revision", 0)})
        fx.changed = True

    def _settle_turns(self, d: Dialog, rows: list[dict[str, Any]]) -> None:
        """Retire the live turn once its rows are history. A running turn retires only with
        assistant/tool rows: its user row alone is committed when it starts."""
        t = d.turn
        if not t:
            return
        mine = [r for r in rows if r.get("turn_id") == t.get("id")]
        if mine and (t.get("status") in TERMINAL or any(r.get("role") != "user" for r in mine)):
            self.finished_turns.add(t["id"])
            if t.get("status") in ("failed", "cancelled"):
                d.notes[t["id"]] = _note(t)
            d.turn = None

    def _merge(self, d: Dialog, rows: list[dict[str, Any]]) -> None:
        fresh = [r for r in rows if r["id"] not in d.ids]
        if fresh:
            d.ids.update(r["id"] for r in fresh)
            d.messages = sorted([*d.messages, *fresh], key=lambda r: r["seq"])

    def _match_pending(self, session_id: str, row: dict[str, Any], *, by_content: bool) -> None:
        """A committed user row replaces its pending copy: by ack'd id, else (sent before its ack
        arrived) by content — only for fresh commits, never for a history refetch."""
        p = next((x for x in self.pending if x.message_id and x.message_id == row.get("id")), None)
        if p is None and by_content:
            p = next(
                (
                    x
                    for x in self._pending_of(session_id)
                    if x.status != "failed" and x.content == row.get("content")
                ),
                None,
            )
        if p is not None:
            self.pending.remove(p)

    def _pending_of(self, session_id: str) -> list[Pending]:
        return [p for p in self.pending if (p.session_id or self.active_session_id) == session_id]

    def _add_line(self, level: str, text: str, session_id: str | None) -> None:
        self._line_counter += 1
        sid = session_id or self.active_session_id
        if sid is None:
            self.loose_lines.append(SystemLine(f"l:{self._line_counter}", level, text, 0))
            return
        d = self.dialog(sid)
        d.lines.append(SystemLine(f"l:{self._line_counter}", level, text, d.revision))


def _note(turn: dict[str, Any]) -> dict[str, Any]:
    return {"status": turn.get("status"), "error": error_text(turn.get("error"))}
