"""What the terminal client knows of the chat: pure protocol state (PROTOCOL §1, seed 003 §12).

``ChatStore.apply(frame)`` takes one decoded server frame and returns :class:`Effects`: frames to
send now (``history`` on a gap, ``sessions``, pending messages after ``ready``) and ``seen``
credits to send once the UI has drawn the snapshots. Per dialog the client holds the committed
``history`` and one ``active_turn``, replaced only by a higher revision of the same turn (or by a
new turn), never rebuilt from deltas. Older history is paged in with ``before_seq`` and kept
across a refetch that joins it; the dialog list pages and searches (``tui.dialogs``). A message
the server refused is resent with its ``client_msg_id`` or dropped; a failed or interrupted turn
is retried as a new message (as the WebUI does). No Textual, no I/O: tests drive it with plain
dicts.
"""

from __future__ import annotations

import uuid
from typing import Any

from tui.dialogs import DialogPages, listing
from tui.model import Dialog, Effects, Pending, SystemLine, turn_note

TERMINAL = frozenset({"completed", "cancelled", "failed"})
RETRYABLE = frozenset({"failed", "interrupted"})  # a stopped turn was the user's choice
NOTICE_MEMORY = 200  # notification ids remembered for de-duplication (a retried send)
OLDER_PAGE = 50  # rows per older-history request (PROTOCOL ``history``: ≤ 200)


class ChatStore:
    """The chat of the authenticated user: dialogs, the active one, pending messages, notices."""

    def __init__(self) -> None:
        self.user = ""
        self.provider: dict[str, Any] = {}
        self.active_session_id: str | None = None
        self.dialogs: dict[str, Dialog] = {}
        self.dialog_list = DialogPages()  # the F2 list
        self.titles: dict[str, str] = {}  # session_id → title, from `sessions` and `session_changed`
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
        return self.titles.get(self.active_session_id or "", "")

    def running_turn(self) -> dict[str, Any] | None:
        """The active dialog's live turn while it runs, else None."""
        d = self.active
        if d and d.turn and d.turn.get("status") not in TERMINAL:
            return d.turn
        return None

    # --- client → server --------------------------------------------------------------------

    def send_text(self, text: str) -> dict[str, Any]:
        """The frame for what the user typed: a slash command (no pending bookkeeping: commands
        get no ``ack``; echoed as a "› /cmd" line, not persisted, before its answer) or a user
        message recorded as pending, to the active dialog."""
        if text.lstrip().startswith("/"):
            self._add_line("command", f"› {text.strip()}", None)
            return self.command(text)
        p = Pending(str(uuid.uuid4()), text, self.active_session_id)
        self.pending.append(p)
        return p.frame()

    def command(self, text: str, session_id: str | None = None) -> dict[str, Any]:
        """A slash command acting on ``session_id`` (default: the active dialog; PROTOCOL §1
        "A command acts on the frame's session_id")."""
        if text.split()[0] == "/sessions":
            self.sessions_answers_due += 1
        out: dict[str, Any] = {"type": "message", "content": text}
        if session_id or self.active_session_id:
            out["session_id"] = session_id or self.active_session_id
        return out

    def older_frame(self) -> dict[str, Any] | None:
        """``history`` for the page above the oldest row shown (``before_seq``); None when the
        active dialog has nothing older, is not loaded yet, or such a page is on its way."""
        d = self.active
        if d is None or not d.loaded or not d.has_more or not d.messages or d.older_before is not None:
            return None
        d.older_before = d.messages[0]["seq"]
        return {
            "type": "history",
            "session_id": d.session_id,
            "before_seq": d.older_before,
            "limit": OLDER_PAGE,
        }

    def refused(self) -> Pending | None:
        """The newest message of the active dialog the server refused (an ``error`` frame named
        its client_msg_id), or None."""
        d = self.active
        mine = self._pending_of(d.session_id) if d else []
        return next((p for p in reversed(mine) if p.status == "failed"), None)

    def retry_refused(self) -> dict[str, Any] | None:
        """The refused message again with the same client_msg_id — the server never makes two
        messages of one id (PROTOCOL ``message``); None when nothing was refused."""
        p = self.refused()
        if p is None:
            return None
        p.status, p.error = "pending", ""
        return p.frame()

    def dismiss_refused(self) -> bool:
        """Forget the refused message; False when there is none."""
        p = self.refused()
        if p is not None:
            self.pending.remove(p)
        return p is not None

    def retryable_row(self) -> dict[str, Any] | None:
        """The user row of the active dialog's latest turn when that turn failed or was
        interrupted (its ``outcome``, else what its terminal snapshot said); None otherwise, and
        while a newer message is on its way or runs (the user has moved on)."""
        d = self.active
        row = next((m for m in reversed(d.messages) if m.get("role") == "user"), None) if d else None
        if d is None or row is None or not row.get("turn_id"):
            return None
        live = d.turn.get("id") if d.turn else None
        if (live and live != row["turn_id"]) or any(
            p.status != "failed" for p in self._pending_of(d.session_id)
        ):
            return None
        status = (row.get("outcome") or {}).get("status") or d.notes.get(row["turn_id"], {}).get("status")
        status = status or (d.turn.get("status") if live else None)
        return row if status in RETRYABLE else None

    def retry_turn(self) -> dict[str, Any] | None:
        """The latest turn's user text again as a new message (a new client_msg_id), when that
        turn failed or was interrupted; None otherwise."""
        row = self.retryable_row()
        return self.send_text(str(row.get("content") or "")) if row else None

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
            d.stale, d.history_requested, d.older_before = True, False, None
            if d.turn and d.turn.get("status") not in TERMINAL and d.turn.get("id") not in running_ids:
                d.turn = None
        self._activate(f.get("active_session_id"), fx)
        for turn in running:
            self._apply_turn(turn, fx)
        fx.send.append({"type": "sessions"})
        self.dialog_list.reset()
        if self.dialog_list.query:
            fx.send.append(self.dialog_list.search(self.dialog_list.query))
        fx.send.extend(p.frame() for p in self.pending if p.status == "pending")
        fx.changed = True

    def _on_ack(self, f: dict[str, Any], fx: Effects) -> None:
        p = next((x for x in self.pending if x.client_msg_id == f.get("client_msg_id")), None)
        if p is None:
            return
        p.status, p.message_id, p.queued = "accepted", f.get("message_id"), int(f.get("queued") or 0)
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
        if d.older_before is not None and (not rows or rows[-1]["seq"] < d.older_before):
            # An older page: prepend it only if it still joins what we hold (a refetch may have
            # replaced that meanwhile).
            if not d.messages or d.messages[0]["seq"] == d.older_before:
                self._merge(d, rows)
                d.has_more = bool(f.get("has_more"))
            d.older_before = None
            fx.changed = True
            return
        if d.loaded and revision < d.revision:
            self._merge(d, rows)  # computed before a commit we already applied: keep the newer rows
        else:
            # Older pages loaded above a refetch that joins them stay (no jump while reading).
            joins = d.loaded and rows and rows[0]["seq"] <= d.revision + 1
            older = [r for r in d.messages if r["seq"] < rows[0]["seq"]] if joins else []
            d.has_more = d.has_more if older else bool(f.get("has_more"))
            d.messages, d.ids, d.revision = [*older, *rows], {r["id"] for r in [*older, *rows]}, revision
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
        items = [i for i in f.get("items") or [] if isinstance(i, dict)]
        self.titles.update((str(i.get("session_id")), str(i.get("title") or "")) for i in items)
        if self.sessions_answers_due and not f.get("offset") and not f.get("query"):
            self.sessions_answers_due -= 1
            self._add_line("info", listing(items, bool(f.get("has_more"))), None)
        self.dialog_list.apply(f)
        active = next((i for i in items if i.get("active")), None)
        if active and active.get("session_id") != self.active_session_id:
            self._activate(active.get("session_id"), fx)
        fx.changed = True

    def _on_session_changed(self, f: dict[str, Any], fx: Effects) -> None:
        sid = str(f.get("session_id"))
        self.dialog_list.changed(f)
        if f.get("deleted"):
            self.titles.pop(sid, None)
            self.dialogs.pop(sid, None)
            if sid == self.active_session_id:
                self.active_session_id = None
            fx.changed = True
            return
        self.titles[sid] = str(f.get("title") or "")
        if f.get("active"):
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
        level, text = str(f.get("level") or "info"), str(f.get("content") or "")
        self._add_line(level, text, f.get("session_id"), f.get("turn_id"))
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
                d.notes[t["id"]] = turn_note(t)
            fx.changed = True
            return
        cur = d.turn
        if cur and cur.get("id") == t["id"] and int(t.get("revision") or 0) <= int(cur.get("revision") or 0):
            return
        if cur is None or cur.get("id") != t["id"]:
            if cur and cur.get("status") in ("failed", "cancelled"):
                d.notes[cur["id"]] = turn_note(cur)
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
                d.notes[t["id"]] = turn_note(t)
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

    def _add_line(self, level: str, text: str, session_id: str | None, turn_id: str | None = None) -> None:
        self._line_counter += 1
        sid = session_id or self.active_session_id
        if sid is None:
            self.loose_lines.append(SystemLine(f"l:{self._line_counter}", level, text, 0))
            return
        d = self.dialog(sid)
        d.lines.append(SystemLine(f"l:{self._line_counter}", level, text, d.revision, turn_id))
