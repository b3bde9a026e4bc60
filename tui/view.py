"""The active dialog as an ordered list of keyed items for the widgets (pure, no Textual).

Order: history rows (a tool row joins its call on the assistant row), each turn's outcome under
its last row, then the notices about that turn (their ``turn_id``); other notices at the point
they arrived; then the live turn's own pending message, the live turn, and messages still queued. Keys are stable across redraws, so the UI updates widgets
in place instead of adding a line per snapshot (seed 003 §12). Lines that a key acts on name it:
the older-history hint (``OLDER_KEY``) and the outcome of a turn that can be retried
(``RETRY_KEY``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from tui.model import Dialog, Pending, SystemLine, error_text
from tui.store import ChatStore

ARGS_PREVIEW_CHARS = 60
OLDER_KEY = "PageUp"  # at the top of the transcript (tui.app)
RETRY_KEY = "Ctrl+R"
DISMISS_KEY = "Ctrl+D"
PHASES = {
    "queued": "queued…",
    "compacting": "compacting the history…",
    "reasoning": "thinking…",
    "responding": "answering…",
    "acting": "running tools…",
    "finalizing": "finishing…",
}
ENDINGS = {"completed": "", "cancelled": "Stopped.", "failed": "Failed"}
CUT_OFF = "Cut off at the model's output limit."
CUT_OFF_THINKING = "The model stopped at its output limit while thinking; no answer."


@dataclass(frozen=True)
class Item:
    """``kind``: row, outcome, line, pending, turn, more. ``data`` is the row / text / Pending /
    turn snapshot; ``results`` maps tool_call_id → tool row (for an assistant row)."""

    key: str
    kind: str
    data: Any
    results: dict[str, dict[str, Any]] | None = None
    connected: bool = True  # for the live turn: False shows "reconnecting…" instead of its phase


def outcome_text(outcome: Any) -> str | None:
    """A user row's ``outcome`` (``{status: failed|interrupted|cancelled, error}``) as the line
    shown under its turn — "Failed: …", "Interrupted: …", "Stopped." — or None (absent/null)."""
    if not isinstance(outcome, dict):
        return None
    status, error = outcome.get("status"), error_text(outcome.get("error"))
    if status == "cancelled":
        return "Stopped."
    if status == "failed":
        return f"Failed: {error}" if error else "Failed."
    if status == "interrupted":
        return f"Interrupted: {error}" if error else "Interrupted."
    return None


def pending_label(p: Pending) -> str:
    """The state shown after "You" on a message not yet in history: "" once the turn answering
    it has started (it is bound to that turn, as the WebUI binds it), else sending…, queued (n
    ahead), sent, or the refusal."""
    if p.status == "failed":
        return f"not sent: {p.error}"
    if p.turn_id:
        return ""
    if p.status == "pending":
        return "sending…"
    return f"queued ({p.queued} ahead)" if p.queued else "sent"


def turn_text(turn: dict[str, Any], connected: bool = True) -> str:
    """The live turn's status line: its phase while it runs ("reconnecting…" while the
    connection is down: the phase shown may be over), else how it ended ("" when completed)."""
    status = turn.get("status")
    if status == "running":
        return PHASES.get(turn.get("phase") or "", "working…") if connected else "reconnecting…"
    if status == "failed":
        return f"Failed: {error_text(turn.get('error'))}".rstrip(": ")
    return ENDINGS.get(status or "", "")


def cut_off_text(truncated: Any, answered: bool) -> str | None:
    """The note under an answer the model stopped at its output limit (``truncated`` on a
    history row or turn snapshot; absent means not cut off), or None."""
    if truncated is not True:
        return None
    return CUT_OFF if answered else CUT_OFF_THINKING


def user_text(row: dict[str, Any]) -> str:
    """A user row's text, then ``[n image(s)]`` when it was sent with images (its ``media``,
    PROTOCOL §1 "History message"; a terminal shows the count, not the pictures)."""
    text = str(row.get("content") or "")
    media = row.get("media")
    count = len(media) if isinstance(media, list) else 0
    if not count:
        return text
    return f"{text} [{count} image{'s' if count != 1 else ''}]"


ORIGIN_MARKS = {"schedule": ("⏰", "Scheduled"), "task_notification": ("⚙", "Background task")}


def sender_label(row: dict[str, Any]) -> str:
    """Who a user row is from: "You", or the mark of input no person typed (PROTOCOL §1
    ``origin``): its icon and the server's label ("⏰ Scheduled (0 9 * * *): news"), else the
    kind's name ("⚙ Background task")."""
    origin = row.get("origin")
    if not isinstance(origin, dict) or not origin.get("kind"):
        return "You"
    icon, what = ORIGIN_MARKS.get(str(origin["kind"]), ("•", "Automated"))
    return f"{icon} {origin.get('label') or what}"


def provider_label(provider: dict[str, Any]) -> str:
    """``name · model``, one of them when they are equal ("replay", not "replay · replay")."""
    name, model = str(provider.get("name") or ""), str(provider.get("model") or "")
    return " · ".join(dict.fromkeys(x for x in (name, model) if x))


def args_preview(arguments: Any) -> str:
    """A tool call's arguments as one short line (JSON, cut at ARGS_PREVIEW_CHARS)."""
    text = json.dumps(arguments, ensure_ascii=False, separators=(", ", ": ")) if arguments else ""
    return text if len(text) <= ARGS_PREVIEW_CHARS else text[: ARGS_PREVIEW_CHARS - 1] + "…"


def tool_line(name: str, arguments: Any, status: str) -> str:
    """``⚙ name {args} — running|completed|failed``."""
    return f"⚙ {name} {args_preview(arguments)} — {status}".replace("  ", " ")


def transcript(store: ChatStore, connected: bool = True) -> list[Item]:
    """The items of the active dialog (see the module docstring); [] before ``ready``.
    ``connected``: whether the connection is up now (the live turn's line says so)."""
    d = store.active
    items = [Item(line.key, "line", line) for line in store.loose_lines]
    if d is None:
        return items
    if d.has_more:
        hint = f"↑ Earlier messages: {OLDER_KEY} at the top loads them."
        items.append(Item("more", "more", "Loading earlier messages…" if d.older_before else hint))
    retry = store.retryable_row() if store.refused() is None else None
    retry_turn = retry.get("turn_id") if retry else None
    results = {m["tool_call_id"]: m for m in d.messages if m.get("role") == "tool" and m.get("tool_call_id")}
    shown_turns = {m.get("turn_id") for m in d.messages if m.get("turn_id")}
    by_turn = [x for x in d.lines if x.turn_id in shown_turns]
    lines = sorted((x for x in d.lines if x.turn_id not in shown_turns), key=lambda x: x.after_seq)
    used_notes: set[str] = set()
    call_ids = _call_ids(d)
    for i, row in enumerate(d.messages):
        while lines and lines[0].after_seq < row["seq"]:
            items.append(_line(lines.pop(0)))
        if row.get("role") != "tool" or row.get("tool_call_id") not in call_ids:
            items.append(Item(f"m:{row['id']}", "row", row, results))
        nxt = d.messages[i + 1] if i + 1 < len(d.messages) else None
        turn_id = row.get("turn_id")
        if turn_id and (nxt is None or nxt.get("turn_id") != turn_id):
            text = _group_outcome(d, turn_id)
            if text:
                text += f"  ({RETRY_KEY}: retry)" if turn_id == retry_turn else ""
                used_notes.add(turn_id)
                items.append(Item(f"o:{turn_id}", "outcome", text))
            items.extend(_line(x) for x in by_turn if x.turn_id == turn_id)
    for turn_id, note in d.notes.items():
        if turn_id not in used_notes and (d.turn is None or d.turn.get("id") != turn_id):
            items.append(Item(f"o:{turn_id}", "outcome", outcome_text(note) or ""))
    items.extend(_line(line) for line in lines)
    mine = [p for p in store.pending if (p.session_id or store.active_session_id) == d.session_id]
    turn_id = d.turn.get("id") if d.turn else None
    items.extend(_pending(p) for p in mine if turn_id and p.turn_id == turn_id)
    if d.turn:
        items.append(Item(f"t:{turn_id}", "turn", d.turn, connected=connected))
    items.extend(_pending(p) for p in mine if not turn_id or p.turn_id != turn_id)
    return items


def _call_ids(d: Dialog) -> set[str]:
    return {c.get("id") for m in d.messages for c in m.get("tool_calls") or [] if isinstance(c, dict)}


def _group_outcome(d: Dialog, turn_id: str) -> str | None:
    """The turn's outcome: the user row's ``outcome`` (persisted), else what its terminal
    snapshot said, else a partial answer's completion_status."""
    group = [m for m in d.messages if m.get("turn_id") == turn_id]
    user = next((m for m in group if m.get("role") == "user"), None)
    text = outcome_text(user.get("outcome")) if user else None
    if text is None and turn_id in d.notes:
        text = outcome_text(d.notes[turn_id])
    if text is None:
        status = next(
            (m.get("completion_status") for m in reversed(group) if m.get("role") == "assistant"), None
        )
        text = {"cancelled": "Stopped.", "interrupted": "Interrupted."}.get(status or "")
    return text


def _line(line: SystemLine) -> Item:
    return Item(line.key, "line", line)


def _pending(p: Pending) -> Item:
    # A copy: the store updates its Pending in place, and a redraw compares items by value.
    return Item(f"p:{p.client_msg_id}", "pending", replace(p))
