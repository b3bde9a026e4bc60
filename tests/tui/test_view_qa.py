"""Findings of the new-user trial of the terminal UI (issue 14), as pure store/view tests: the
pending label once its turn runs, notices placed after their turn, the live turn while
disconnected, output-limit notes, link addresses, the dialog list's labels and handshake answers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from tests.tui.test_store import SID, committed, loaded, ready, row, turn
from tui.connection import handshake_verdict
from tui.dialogs import dialog_label, listing, when
from tui.markdown import parser
from tui.store import ChatStore
from tui.view import CUT_OFF, CUT_OFF_THINKING, cut_off_text, pending_label, transcript, turn_text


def test_a_message_is_queued_until_its_turn_starts_and_then_not():
    store = loaded()
    frame = store.send_text("hello")
    assert pending_label(store.pending[0]) == "sending…"
    store.apply({"type": "ack", "client_msg_id": frame["client_msg_id"], "session_id": SID,
                 "message_id": "u1", "queued": 1})  # fmt: skip
    assert pending_label(store.pending[0]) == "queued (1 ahead)"
    store.apply({"type": "turn_updated", "turn": turn(1, phase="responding")})
    assert pending_label(store.pending[0]) == ""
    kinds = [i.kind for i in transcript(store)]
    assert kinds == ["pending", "turn"], "the message stands above the turn answering it"


def test_an_acknowledged_message_with_nothing_ahead_is_sent_not_queued():
    store = loaded()
    frame = store.send_text("hello")
    store.apply({"type": "ack", "client_msg_id": frame["client_msg_id"], "session_id": SID,
                 "message_id": "u1", "queued": 0})  # fmt: skip
    assert pending_label(store.pending[0]) == "sent"


def test_a_notice_about_a_turn_follows_that_turns_rows_even_when_it_arrived_first():
    store = ChatStore()
    store.apply(ready())
    store.apply({"type": "notification", "level": "warning", "content": "Your last turn was interrupted",
                 "session_id": SID, "id": "interrupted:t2", "turn_id": "t2"})  # fmt: skip
    store.apply({"type": "notification", "level": "info", "content": "welcome", "session_id": SID})
    store.apply({"type": "session_history", "session_id": SID, "history_revision": 3, "has_more": False,
                 "messages": [row(1), row(2, "assistant"),
                              row(3, turn_id="t2", outcome={"status": "interrupted", "error": ""})]})  # fmt: skip
    shown = [(i.kind, i.data.text if i.kind == "line" else i.data if i.kind == "outcome" else i.data["seq"])
             for i in transcript(store)]  # fmt: skip
    assert shown == [("line", "welcome"), ("row", 1), ("row", 2), ("row", 3), ("outcome", "Interrupted.  (Ctrl+R: retry)"),
                     ("line", "Your last turn was interrupted")]  # fmt: skip


def test_a_notice_about_a_turn_not_shown_stays_where_it_arrived():
    store = loaded(row(1), row(2, "assistant"))
    store.apply({"type": "notification", "level": "info", "content": "later", "session_id": SID,
                 "turn_id": "elsewhere"})  # fmt: skip
    assert [i.kind for i in transcript(store)][-1] == "line"


@pytest.mark.parametrize(
    ("snapshot", "connected", "text"),
    [
        ({"status": "running", "phase": "responding"}, True, "answering…"),
        ({"status": "running", "phase": "responding"}, False, "reconnecting…"),
        ({"status": "cancelled"}, False, "Stopped."),
        ({"status": "failed", "error": {"message": "boom"}}, True, "Failed: boom"),
    ],
)
def test_the_live_turn_says_reconnecting_while_the_connection_is_down(
    snapshot: dict[str, Any], connected: bool, text: str
):
    assert turn_text(snapshot, connected) == text


def test_the_transcript_passes_the_connection_state_to_the_live_turn():
    store = loaded(row(1))
    store.apply({"type": "turn_updated", "turn": turn(1, turn_id="t2")})
    assert transcript(store, connected=False)[-1].connected is False


@pytest.mark.parametrize(
    ("truncated", "answered", "note"),
    [(None, True, None), (False, True, None), (True, True, CUT_OFF), (True, False, CUT_OFF_THINKING)],
)
def test_an_answer_cut_off_at_the_output_limit_says_so(truncated: Any, answered: bool, note: str | None):
    assert cut_off_text(truncated, answered) == note


def test_a_truncated_history_row_reaches_the_view_unchanged():
    store = loaded(row(1))
    store.apply(committed(row(2, "assistant", content="", reasoning="hm", truncated=True)))
    assert transcript(store)[-1].data["truncated"] is True


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("A link: [example](https://example.com)", "A link: example (https://example.com)"),
        ("[https://x.org](https://x.org) and <https://y.org>", "https://x.org and https://y.org"),
        ("[x.org](https://x.org/)", "x.org"),
        ("`[not](a link)`", "[not](a link)"),
    ],
)
def test_a_link_shows_its_address_after_its_text(source: str, shown: str):
    tokens = parser().parse(source)
    assert "".join(c.content for t in tokens if t.children for c in t.children) == shown


NOW = datetime(2025, 6, 10, 15, 0)


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


@pytest.mark.parametrize(
    ("at", "text"),
    [
        (datetime(2025, 6, 10, 14, 2), "today 14:02"),
        (datetime(2025, 6, 9, 23, 59), "yesterday 23:59"),
        (datetime(2025, 3, 3, 9, 0), "3 Mar"),
        (datetime(2024, 3, 3, 9, 0), "3 Mar 2024"),
    ],
)
def test_last_active_is_shown_relative_to_today(at: datetime, text: str):
    assert when(ms(at), NOW) == text


def test_a_dialog_label_has_its_time_a_correct_plural_and_a_preview_for_the_default_title():
    item = {"session_id": "s", "dialog_id": "8f07808a", "title": "New chat", "message_count": 1,
            "last_active_at": ms(datetime(2025, 6, 10, 14, 2)), "active": True}  # fmt: skip
    assert dialog_label(item, NOW) == "▶ New chat · today 14:02 · 1 message · 8f07808a"
    item["preview"] = "What time is it?"
    assert dialog_label(item, NOW) == "▶ “What time is it?” · today 14:02 · 1 message · 8f07808a"
    item.update(title="Clocks", message_count=2, active=False)
    assert dialog_label(item, NOW) == "  Clocks · today 14:02 · 2 messages · 8f07808a"
    assert "(1 message)" in listing([{"dialog_id": "a", "title": "x", "message_count": 1}], False)


@pytest.mark.parametrize(
    ("url", "status", "verdict"),
    [
        ("ws://h/ws/chat/", 401, "refused"),
        ("ws://h/ws/chat/", 403, "refused"),
        ("ws://h/some/path", 403, "not_found"),
        ("ws://h/ws/chat/", 404, "not_found"),
        ("ws://h/", 200, "not_found"),
        ("ws://h/ws/chat/", 502, "retry"),
        ("ws://h/ws/chat/", 429, "retry"),
    ],
)
def test_a_handshake_answer_tells_a_wrong_url_from_a_refused_token(url: str, status: int, verdict: str):
    assert handshake_verdict(url, status) == verdict
