"""The terminal client's paging and retries (tui.dialogs, tui.store, tui.view): the dialog list
pages and searches (PROTOCOL §1 ``sessions``), older history comes by ``before_seq``, a refused
message is resent with its ``client_msg_id``, a failed turn is retried as a new message.

Plain dicts in, frames and view items out; no Textual, no network, no Django.
"""

from __future__ import annotations

from typing import Any

from tests.tui.test_store import OTHER, SID, committed, loaded, ready, row, turn
from tui.dialogs import PAGE_SIZE, DialogPages
from tui.store import ChatStore
from tui.view import transcript


def item(n: int, active: bool = False) -> dict[str, Any]:
    return {
        "session_id": f"cli_chat:1:d{n}",
        "dialog_id": f"d{n}",
        "title": f"Dialog {n:02}",
        "active": active,
    }


def page(offset: int, *numbers: int, has_more: bool, query: str | None = None) -> dict[str, Any]:
    frame = {"type": "sessions", "items": [item(n) for n in numbers], "has_more": has_more, "offset": offset}
    return {**frame, "query": query} if query else frame


def history(*rows: dict[str, Any], has_more: bool, revision: int) -> dict[str, Any]:
    return {"type": "session_history", "session_id": SID, "history_revision": revision, "messages": list(rows),
            "has_more": has_more}  # fmt: skip


# --- the dialog list ------------------------------------------------------------------------------


def test_the_list_pages_by_the_echoed_offset_until_has_more_is_false():
    pages = DialogPages()
    assert pages.search() == {"type": "sessions", "limit": PAGE_SIZE, "offset": 0}
    assert pages.more() is None, "one page at a time"
    assert pages.apply(page(0, 1, 2, has_more=True))
    assert pages.more() == {"type": "sessions", "limit": PAGE_SIZE, "offset": 2}
    assert not pages.apply(page(5, 9, has_more=False)), "an answer at another offset is stale"
    assert pages.apply(page(2, 2, 3, has_more=False))
    assert [i["dialog_id"] for i in pages.items] == ["d1", "d2", "d3"], "a dialog listed twice once"
    assert pages.more() is None and not pages.loading


def test_a_search_asks_with_its_query_and_ignores_answers_of_the_previous_one():
    pages = DialogPages()
    pages.apply(page(0, 1, 2, 3, has_more=False))
    assert pages.search("  Dialog 0 ") == {
        "type": "sessions",
        "limit": PAGE_SIZE,
        "offset": 0,
        "query": "Dialog 0",
    }
    assert [i["dialog_id"] for i in pages.items] == ["d1", "d2", "d3"], "kept until the answer arrives"
    assert not pages.apply(page(0, 7, has_more=False, query="Dialog"))
    assert not pages.apply(page(0, 7, has_more=False)), "the unfiltered list is not this search's answer"
    assert pages.apply(page(0, 1, has_more=True, query="Dialog 0"))
    assert pages.more() == {"type": "sessions", "limit": PAGE_SIZE, "offset": 1, "query": "Dialog 0"}


def test_session_changed_keeps_the_loaded_list_current():
    pages = DialogPages()
    pages.apply(page(0, 1, 2, has_more=True))
    pages.changed({"session_id": "cli_chat:1:d9", "dialog_id": "d9", "title": "New", "active": True})
    pages.changed({"session_id": "cli_chat:1:d2", "dialog_id": "d2", "title": "Renamed", "active": False})
    pages.changed({"session_id": "cli_chat:1:d1", "dialog_id": "d1", "title": "", "deleted": True})
    assert [(i["title"], i["active"]) for i in pages.items] == [("New", True), ("Renamed", False)]
    assert pages.more()["offset"] == 2, "one created and one deleted: the server's offset too"


def test_a_reconnect_asks_for_the_search_shown_again():
    store = ChatStore()
    store.apply(ready())
    store.dialog_list.search("story")
    fx = store.apply(ready())
    assert {"type": "sessions", "limit": PAGE_SIZE, "offset": 0, "query": "story"} in fx.send


def test_a_typed_sessions_answer_goes_to_the_transcript_and_the_list_page_does_not():
    store = loaded(row(1))
    store.apply(page(0, 1, has_more=False, query="Dialog"))
    store.apply(store.send_text("/sessions") and page(0, 1, 2, has_more=True))
    lines = [i.data.text for i in transcript(store) if i.kind == "line"]
    assert len(lines) == 2 and lines[0] == "› /sessions"  # the typed command, then its answer
    assert "d2  Dialog 02" in lines[1] and "F2" in lines[1]
    assert store.titles["cli_chat:1:d2"] == "Dialog 02"


def test_a_command_acts_on_the_dialog_it_names():
    store = loaded(row(1))
    assert store.command("/rename Trip", OTHER) == {
        "type": "message",
        "content": "/rename Trip",
        "session_id": OTHER,
    }
    assert store.command("/new")["session_id"] == SID


# --- older history --------------------------------------------------------------------------------


def older_store() -> ChatStore:
    store = ChatStore()
    store.apply(ready())
    store.apply(
        history(row(51, turn_id="t51"), row(52, "assistant", turn_id="t51"), has_more=True, revision=52)
    )
    return store


def test_older_messages_are_asked_for_below_the_oldest_row_once_and_prepended():
    store = older_store()
    assert "PageUp" in transcript(store)[0].data
    assert store.older_frame() == {"type": "history", "session_id": SID, "before_seq": 51, "limit": 50}
    assert store.older_frame() is None, "one page at a time"
    assert transcript(store)[0].data == "Loading earlier messages…"
    store.apply(
        history(row(49, turn_id="t49"), row(50, "assistant", turn_id="t49"), has_more=False, revision=52)
    )
    d = store.active
    assert [m["seq"] for m in d.messages] == [49, 50, 51, 52] and d.revision == 52
    assert not d.has_more and store.older_frame() is None
    assert transcript(store)[0].kind == "row"


def test_a_refetch_keeps_the_older_rows_it_joins_and_drops_a_stale_older_page():
    store = older_store()
    store.older_frame()
    store.apply(history(row(50, "assistant", turn_id="t49"), has_more=True, revision=52))
    store.apply(committed(row(54, turn_id="t54")))  # a gap: the whole newest page is asked for again
    store.apply(history(*(row(s, turn_id=f"t{s}") for s in (52, 53, 54)), has_more=True, revision=54))
    d = store.active
    assert [m["seq"] for m in d.messages] == [50, 51, 52, 53, 54] and d.has_more
    store.older_frame()
    store.apply(history(*(row(s, turn_id="x") for s in (80, 81)), has_more=False, revision=81))  # replaced
    store.apply(history(row(49), has_more=False, revision=81))
    assert [m["seq"] for m in store.active.messages] == [80, 81], "the older page no longer joins"


# --- refused messages and failed turns ------------------------------------------------------------


def refused_store() -> tuple[ChatStore, dict[str, Any]]:
    store = loaded(row(1), row(2, "assistant"))
    sent = store.send_text("Hello")
    store.apply({"type": "error", "code": "inbox_full", "message": "too many queued",
                 "client_msg_id": sent["client_msg_id"]})  # fmt: skip
    return store, sent


def test_a_refused_message_is_sent_again_with_the_same_client_msg_id():
    store, sent = refused_store()
    assert store.refused() is not None and store.retry_turn() is None
    assert store.retry_refused() == sent
    assert store.refused() is None and store.pending[0].status == "pending"
    assert store.retry_refused() is None


def test_a_refused_message_can_be_dismissed():
    store, _ = refused_store()
    assert store.dismiss_refused() and store.pending == [] and not store.dismiss_refused()


def test_a_failed_turn_is_retried_as_a_new_message_with_its_text():
    failed = {"status": "failed", "error": "the model provider could not be reached"}
    store = loaded(row(1, outcome=failed))
    outcome = next(i.data for i in transcript(store) if i.kind == "outcome")
    assert outcome.startswith("Failed: the model provider") and "Ctrl+R" in outcome
    frame = store.retry_turn()
    assert frame["content"] == "text 1" and frame["client_msg_id"] == store.pending[0].client_msg_id
    assert store.retry_turn() is None, "not again while the retry is on its way"


def test_a_turn_that_failed_live_is_retryable_and_a_stopped_one_is_not():
    store = loaded(row(1))
    store.apply({"type": "turn_updated", "turn": turn(3, "failed", error="unreachable")})
    assert store.retryable_row()["id"] == "m1"
    stopped = loaded(row(1, outcome={"status": "cancelled", "error": ""}))
    assert stopped.retryable_row() is None
    moved_on = loaded(row(1, outcome={"status": "interrupted", "error": ""}))
    assert moved_on.retryable_row() is not None
    moved_on.apply({"type": "turn_updated", "turn": turn(1, turn_id="t2")})
    assert moved_on.retryable_row() is None, "a newer turn runs"


def test_a_pending_message_item_changes_when_its_status_does():
    store = loaded(row(1))
    store.send_text("Hello")
    before = [i for i in transcript(store) if i.kind == "pending"]
    store.apply(
        {
            "type": "error",
            "code": "inbox_full",
            "message": "full",
            "client_msg_id": store.pending[0].client_msg_id,
        }
    )
    after = [i for i in transcript(store) if i.kind == "pending"]
    assert before != after and after[0].data.status == "failed", "a redraw compares items by value"
