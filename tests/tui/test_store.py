"""The terminal client's protocol state (tui.store, tui.view): PROTOCOL §1, seed 003 §12.

Plain dicts in, effects and view items out; no Textual, no network, no Django.
"""

from __future__ import annotations

from typing import Any

import pytest

from tui.store import ChatStore
from tui.view import outcome_text, provider_label, transcript

SID = "cli_chat:1:d1"
OTHER = "cli_chat:1:d2"


def row(seq: int, role: str = "user", turn_id: str | None = "t1", **extra: Any) -> dict[str, Any]:
    return {"id": f"m{seq}", "seq": seq, "role": role, "content": f"text {seq}", "turn_id": turn_id, **extra}


def turn(revision: int, status: str = "running", turn_id: str = "t1", **extra: Any) -> dict[str, Any]:
    return {"id": turn_id, "session_id": SID, "revision": revision, "status": status, "phase": "responding",
            "blocks": [], **extra}  # fmt: skip


def ready(**extra: Any) -> dict[str, Any]:
    frame = {"type": "ready", "user": "alice", "active_session_id": SID, "running": [],
             "provider": {"name": "replay", "model": "replay", "offline": True}}  # fmt: skip
    return {**frame, **extra}


def loaded(*rows: dict[str, Any]) -> ChatStore:
    store = ChatStore()
    store.apply(ready())
    store.apply({"type": "session_history", "session_id": SID, "history_revision": len(rows),
                 "messages": list(rows), "has_more": False})  # fmt: skip
    return store


def committed(*rows: dict[str, Any], revision: int | None = None) -> dict[str, Any]:
    return {"type": "turn_committed", "session_id": SID, "messages": list(rows),
            "history_revision": revision or rows[-1]["seq"]}  # fmt: skip


def test_ready_requests_the_active_history_and_the_dialog_list():
    fx = ChatStore().apply(ready())
    assert fx.send == [{"type": "history", "session_id": SID}, {"type": "sessions"}]


def test_a_commit_right_after_our_revision_is_applied_and_duplicates_are_skipped():
    store = loaded(row(1), row(2, "assistant"))
    fx = store.apply(committed(row(2, "assistant"), row(3, turn_id="t2"), row(4, "assistant", turn_id="t2")))
    assert fx.send == []
    d = store.active
    assert [m["seq"] for m in d.messages] == [1, 2, 3, 4] and d.revision == 4


def test_a_gap_asks_for_the_history_once_until_it_arrives():
    store = loaded(row(1), row(2, "assistant"))
    first = store.apply(committed(row(5, turn_id="t3")))
    second = store.apply(committed(row(6, "assistant", turn_id="t3")))
    assert first.send == [{"type": "history", "session_id": SID}] and second.send == []
    assert [m["seq"] for m in store.active.messages] == [1, 2], "a gap is never filled from deltas"
    store.apply({"type": "session_history", "session_id": SID, "history_revision": 6, "has_more": False,
                 "messages": [row(i, turn_id=None) for i in range(1, 7)]})  # fmt: skip
    assert store.active.revision == 6
    assert store.apply(committed(row(8, turn_id="t4"))).send == [{"type": "history", "session_id": SID}]


def test_a_commit_before_the_history_arrived_waits_for_that_history():
    store = ChatStore()
    store.apply(ready())
    fx = store.apply(committed(row(1)))
    assert fx.send == [] and store.active.messages == [], "the history already requested covers it"


def test_a_history_answer_older_than_a_missed_commit_is_asked_for_again():
    store = ChatStore()
    store.apply(ready())
    store.apply(committed(row(1), row(2, "assistant")))
    fx = store.apply({"type": "session_history", "session_id": SID, "history_revision": 0, "has_more": False,
                      "messages": []})  # fmt: skip
    assert fx.send == [{"type": "history", "session_id": SID}]
    store.apply({"type": "session_history", "session_id": SID, "history_revision": 2, "has_more": False,
                 "messages": [row(1), row(2, "assistant")]})  # fmt: skip
    assert store.active.revision == 2 and store.active.behind == 0


def test_an_older_history_answer_keeps_the_rows_committed_since():
    store = loaded(row(1), row(2, "assistant"))
    store.apply(committed(row(3, turn_id="t2")))
    store.apply({"type": "session_history", "session_id": SID, "history_revision": 2, "has_more": False,
                 "messages": [row(1), row(2, "assistant")]})  # fmt: skip
    assert [m["seq"] for m in store.active.messages] == [1, 2, 3]


@pytest.mark.parametrize(
    ("revisions", "shown"),
    [([1, 2, 3], 3), ([3, 2, 1], 3), ([1, 3, 2], 3), ([2, 2], 2)],
)
def test_the_active_turn_is_replaced_only_by_a_higher_revision(revisions: list[int], shown: int):
    store = loaded()
    for r in revisions:
        store.apply({"type": "turn_updated", "turn": turn(r, blocks=[{"type": "assistant", "text": str(r)}])})
    assert store.active.turn["revision"] == shown
    assert store.active.turn["blocks"] == [{"type": "assistant", "text": str(shown)}]


def test_running_snapshots_earn_seen_credits_and_terminal_ones_do_not():
    store = loaded()
    running = store.apply({"type": "turn_updated", "turn": turn(4)})
    done = store.apply({"type": "turn_updated", "turn": turn(5, "completed")})
    assert running.seen == [{"type": "seen", "turn_id": "t1", "revision": 4}] and done.seen == []


def test_ready_running_shows_the_live_turn_and_drops_one_that_ended_while_away():
    store = loaded()
    store.apply({"type": "turn_updated", "turn": turn(3)})
    store.apply(ready(running=[]))
    assert store.active.turn is None
    store.apply(ready(running=[turn(9, turn_id="t7")]))
    assert store.active.turn["id"] == "t7" and store.running_turn() is not None


def test_the_turn_retires_into_history_when_its_answer_is_committed_in_either_order():
    store = loaded()
    store.apply({"type": "turn_updated", "turn": turn(2)})
    store.apply(committed(row(1)))
    assert store.active.turn is not None, "the user row alone is committed when the turn starts"
    store.apply(committed(row(2, "assistant")))
    assert store.active.turn is None
    store.apply({"type": "turn_updated", "turn": turn(9, "completed")})
    assert store.active.turn is None, "a late terminal snapshot of a committed turn stays retired"


def test_pending_messages_are_resent_with_their_client_msg_id_until_acknowledged():
    store = loaded()
    frame = store.send_text("hello")
    assert frame["client_msg_id"] and frame["session_id"] == SID
    resent = [f for f in store.apply(ready()).send if f["type"] == "message"]
    assert resent == [frame]
    store.apply(
        {"type": "ack", "client_msg_id": frame["client_msg_id"], "session_id": SID, "message_id": "m1"}
    )
    assert [f for f in store.apply(ready()).send if f["type"] == "message"] == []
    store.apply({"type": "session_history", "session_id": SID, "history_revision": 1, "has_more": False,
                 "messages": [row(1, content="hello")]})  # fmt: skip
    assert store.pending == []


def test_a_message_committed_before_its_ack_replaces_its_pending_copy():
    store = loaded()
    store.send_text("text 1")
    store.apply(committed(row(1)))
    assert store.pending == []


def test_slash_commands_are_never_pending_and_a_refused_message_is_marked_failed():
    store = loaded()
    assert store.send_text("/help") == {"type": "message", "content": "/help", "session_id": SID}
    frame = store.send_text("hi")
    store.apply(
        {
            "type": "error",
            "code": "inbox_full",
            "message": "too many",
            "client_msg_id": frame["client_msg_id"],
        }
    )
    assert [(p.status, p.error) for p in store.pending] == [("failed", "too many")]


def test_stop_names_the_running_turn_and_nothing_when_idle():
    store = loaded()
    assert store.stop_frame() is None
    store.apply({"type": "turn_updated", "turn": turn(1)})
    assert store.stop_frame() == {"type": "stop", "session_id": SID, "turn_id": "t1"}


@pytest.mark.parametrize(
    ("outcome", "text"),
    [
        (None, None),
        ({"status": "failed", "error": "the model provider could not be reached"},
         "Failed: the model provider could not be reached"),
        ({"status": "interrupted", "error": "interrupted by a server restart"},
         "Interrupted: interrupted by a server restart"),
        ({"status": "cancelled", "error": None}, "Stopped."),
        ({"status": "failed", "error": {"code": "x", "message": "boom", "ref": "r1"}}, "Failed: boom (ref r1)"),
    ],
)  # fmt: skip
def test_outcome_text(outcome: Any, text: str | None):
    assert outcome_text(outcome) == text


def test_a_user_row_outcome_is_shown_under_its_turn_and_its_absence_tolerated():
    failed = {"status": "failed", "error": "no model"}
    store = loaded(row(1, outcome=failed), row(2, turn_id="t2"), row(3, "assistant", turn_id="t2"))
    items = transcript(store)
    assert [(i.kind, i.key) for i in items] == [
        ("row", "m:m1"),
        ("outcome", "o:t1"),
        ("row", "m:m2"),
        ("row", "m:m3"),
    ]
    assert items[1].data == "Failed: no model"


def test_a_failed_live_turn_keeps_its_outcome_after_it_is_replaced():
    store = loaded(row(1))
    store.apply({"type": "turn_updated", "turn": turn(3, "failed", error={"message": "unreachable"})})
    store.apply({"type": "turn_updated", "turn": turn(1, turn_id="t2")})
    texts = [i.data for i in transcript(store) if i.kind == "outcome"]
    assert texts == ["Failed: unreachable"]


def test_notices_are_shown_once_where_they_arrived():
    store = loaded(row(1), row(2, "assistant"))
    note = {"type": "notification", "level": "info", "content": "Compacted.", "id": "n1"}
    store.apply(note)
    store.apply(note)
    store.apply(committed(row(3, turn_id="t2")))
    assert [i.kind for i in transcript(store)] == ["row", "row", "line", "row"]


def test_a_tool_result_joins_its_call_and_a_typed_sessions_is_answered_in_the_transcript():
    call = {"id": "c1", "name": "current_time", "arguments": {}}
    store = loaded(row(1), row(2, "assistant", tool_calls=[call]), row(3, "tool", tool_call_id="c1"))
    assert [i.key for i in transcript(store)] == ["m:m1", "m:m2"]
    store.send_text("/sessions")
    store.apply(
        {"type": "sessions", "items": [{"session_id": SID, "dialog_id": "d1", "title": "Hi", "active": True}]}
    )
    assert "d1  Hi" in transcript(store)[-1].data.text


def test_session_changed_switches_and_a_deleted_dialog_is_dropped_with_its_turn():
    store = loaded(row(1))
    fx = store.apply(
        {"type": "session_changed", "session_id": OTHER, "dialog_id": "d2", "title": "B", "active": True}
    )
    assert store.active_session_id == OTHER and fx.send == [{"type": "history", "session_id": OTHER}]
    store.apply(
        {"type": "session_changed", "session_id": SID, "dialog_id": "d1", "title": "", "deleted": True}
    )
    assert SID not in store.dialogs and [i["session_id"] for i in store.dialog_list.items] == [OTHER]
    assert store.active_title == "B"


@pytest.mark.parametrize(
    ("provider", "label"),
    [({"name": "replay", "model": "replay"}, "replay"), ({"name": "openai", "model": "gpt"}, "openai · gpt")],
)
def test_provider_label_is_de_duplicated(provider: dict[str, str], label: str):
    assert provider_label(provider) == label


def test_a_typed_command_is_echoed_just_before_its_answer_and_not_sent_as_a_message():
    store = loaded(row(1), row(2, "assistant"))
    assert store.send_text(" /help ") == {"type": "message", "content": " /help ", "session_id": SID}
    store.apply({"type": "notification", "level": "info", "content": "Commands: …", "id": "n1"})
    items = transcript(store)
    assert [(i.kind, getattr(i.data, "text", None)) for i in items[-2:]] == [
        ("line", "› /help"),
        ("line", "Commands: …"),
    ]
    assert not store.pending and items[-2].data.level not in ("warning", "error")
    store.command("/switch d2")  # a command from the dialog list (F2) is not typed: no echo
    assert sum(i.kind == "line" for i in transcript(store)) == 2
