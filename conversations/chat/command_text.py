"""Command answers as plain text, for platforms without rich frames (PROTOCOL "Slash commands").

Pure: no Django. Feishu (and any text-only channel) renders the very frames a cli_chat client
receives, so a command means the same on every channel (seed 004 §7).
"""

from __future__ import annotations

from datetime import UTC, datetime


def dialog_label(title: str, session_id: str) -> str:
    """``“Title” (3fa2b9c1)``: a dialog named in a list line; the end of its id tells apart the
    dialogs of one title ("New chat")."""
    return f"“{title}” ({str(session_id).rsplit(':', 1)[-1]})"


def render_text(frame: dict) -> str | None:
    """The text of one answer frame, or None for frames a text platform does not show.

    ``sessions`` → a numbered list (active marked); ``session_changed`` → what changed;
    ``session_history`` → a one-line count (the platform's own chat already shows history);
    ``notification`` → its content; ``error`` → its message. Other frames → None.
    """
    kind = frame.get("type")
    if kind == "sessions":
        items = frame.get("items") or []
        if not items:
            return "No dialogs yet."
        lines = ["Your dialogs (most recent first):"]
        for number, item in enumerate(items, 1):
            marker = " ← active" if item.get("active") else ""
            when = datetime.fromtimestamp(int(item.get("last_active_at") or 0) / 1000, UTC).strftime(
                "%Y-%m-%d %H:%M"
            )
            lines.append(
                f"{number}. {item.get('title')} [{item.get('dialog_id')}] · {item.get('message_count', 0)} messages"
                f" · {when} UTC{marker}"
            )
        lines.append("Switch with /switch <id>.")
        return "\n".join(lines)
    if kind == "session_changed":
        title, dialog_id = frame.get("title"), frame.get("dialog_id")
        if frame.get("deleted"):
            return f"Deleted “{title}” [{dialog_id}]."
        if frame.get("active"):
            return f"Now in “{title}” [{dialog_id}]."
        return f"“{title}” [{dialog_id}] updated."
    if kind == "session_history":
        count = len(frame.get("messages") or [])
        return f"{count} earlier messages in this dialog." if count else "This dialog has no messages yet."
    if kind == "notification":
        return str(frame.get("content") or "") or None
    if kind == "error":
        return f"⚠️ {frame.get('message') or frame.get('code') or 'error'}"
    return None
