"""Command answers rendered for text-only platforms (PROTOCOL: "the same answers rendered as text")."""

from __future__ import annotations

from conversations.chat.command_text import render_text


def test_sessions_render_as_a_numbered_list_with_the_active_one_marked():
    text = render_text(
        {
            "type": "sessions",
            "items": [
                {
                    "session_id": "f:c:a1",
                    "dialog_id": "a1",
                    "title": "Trip",
                    "last_active_at": 1_764_400_000_000,
                    "message_count": 4,
                    "active": True,
                },
                {
                    "session_id": "f:c:b2",
                    "dialog_id": "b2",
                    "title": "Taxes",
                    "last_active_at": 1_764_300_000_000,
                    "message_count": 1,
                    "active": False,
                },
            ],
        }
    )
    lines = text.splitlines()
    assert lines[1].startswith("1. Trip [a1] · 4 messages") and lines[1].endswith("← active")
    assert lines[2].startswith("2. Taxes [b2]") and "active" not in lines[2]
    assert render_text({"type": "sessions", "items": []}) == "No dialogs yet."


def test_changes_notifications_and_errors_render_as_sentences():
    base = {"type": "session_changed", "session_id": "f:c:a1", "dialog_id": "a1", "title": "Trip"}
    assert render_text({**base, "active": True}) == "Now in “Trip” [a1]."
    assert render_text({**base, "active": False, "deleted": True}) == "Deleted “Trip” [a1]."
    assert render_text({**base, "active": False}) == "“Trip” [a1] updated."
    assert (
        render_text({"type": "notification", "level": "info", "content": "Nothing is running."})
        == "Nothing is running."
    )
    assert (
        render_text({"type": "error", "code": "not_found", "message": "no dialog 'x'"}) == "⚠️ no dialog 'x'"
    )
    assert (
        render_text({"type": "session_history", "messages": [{}, {}]}) == "2 earlier messages in this dialog."
    )
    assert render_text({"type": "turn_updated"}) is None
