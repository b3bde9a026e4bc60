"""A user row's ``outcome`` in every protocol form of history (PROTOCOL §1 "History message").

The outcome is read from the user row's inbox row (same id): ``turn_outcome`` maps its status,
outcome and error; ``history_page`` reads it for a whole page in one more query; the
``turn_committed`` rows (``commit_turn``, ``interrupted_commit``) and the reconcile path
(``turn_states``) carry it too.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.models import Dialog, InboxMessage, Message, now_ms
from conversations.storage.shapes import TURN_INTERRUPTED_ERROR, history_row_to_protocol, turn_outcome

pytestmark = [pytest.mark.django_db]

CHANNEL = "cli_chat"
CHAT = "chat-alice"
LEASE_MS = 15_000
FAILED = "The model provider could not be reached (connection) (ref 1a2b3c4d)."
NOT_SAVED = (
    "The answer could not be saved; what was shown while it streamed is not in the history (ref 5e6f7a8b)."
)


@pytest.mark.parametrize(
    ("status", "outcome", "error", "expected"),
    [
        ("queued", "", "", None),
        ("started", "", "", None),
        ("done", "completed", "", None),
        ("done", "failed", FAILED, {"status": "failed", "error": FAILED}),
        ("done", "cancelled", "stopped", {"status": "cancelled", "error": "stopped"}),
        ("done", "cancelled", "", {"status": "cancelled", "error": ""}),
        # Rows from before the ``outcome`` column, and a queued row dropped by /delete.
        ("done", "", "the dialog was deleted", None),
        # Every interrupted row reads as its snapshot did, whatever older rows stored.
        (
            "interrupted",
            "failed",
            "interrupted by a restart",
            {"status": "interrupted", "error": TURN_INTERRUPTED_ERROR},
        ),
    ],
)
def test_the_outcome_of_each_inbox_state(status, outcome, error, expected):
    assert turn_outcome(status, outcome, error) == expected


def test_only_user_rows_carry_an_outcome_and_every_row_has_the_field():
    shown = {"status": "failed", "error": FAILED}
    user = history_row_to_protocol({"role": "user", "content": "hi"}, outcome=shown)
    answer = history_row_to_protocol({"role": "assistant", "content": "x"}, outcome=shown)
    assert user["outcome"] == shown
    assert "outcome" in answer and answer["outcome"] is None
    assert history_row_to_protocol({"role": "user", "content": "hi"})["outcome"] is None


# --- a dialog with one turn of each ending -----------------------------------------------------------


@pytest.fixture
def alice():
    return get_or_create_user("alice")[0]


def run_turn(owner, dialog_id: str, text: str, worker: str = "w1") -> tuple[int, storage.TurnStart]:
    storage.accept_message(owner, CHANNEL, CHAT, text, session_id=dialog_id)
    epoch = storage.claim_lease(dialog_id, worker, LEASE_MS)
    start = storage.start_next_turn(dialog_id, worker, epoch)
    assert start is not None
    return epoch, start


def answer(start: storage.TurnStart, text: str, status: str = "completed") -> dict:
    return {
        "id": start.reply_message_id,
        "role": "assistant",
        "content": text,
        "turn_id": start.turn_id,
        "completion_status": status,
    }


@pytest.fixture
def endings(alice) -> dict:
    """One dialog: failed, cancelled, completed, abandoned (commit refused), interrupted by a
    takeover, running, queued — in that order. Returns ``{ending: user row id}`` and commits."""
    dialog = storage.active_dialog(alice, CHANNEL, CHAT)
    ids: dict = {"dialog": dialog.id, "commits": {}}
    epoch, start = run_turn(alice, dialog.id, "fails")
    ids["commits"]["failed"] = storage.commit_turn(
        dialog.id, "w1", epoch, start.inbox_id, [], outcome="failed", error=FAILED
    )
    ids["failed"] = start.inbox_id
    epoch, start = run_turn(alice, dialog.id, "stopped")
    ids["commits"]["cancelled"] = storage.commit_turn(
        dialog.id,
        "w1",
        epoch,
        start.inbox_id,
        [answer(start, "Half", "cancelled")],
        outcome="cancelled",
        error="stopped",
    )
    ids["cancelled"] = start.inbox_id
    epoch, start = run_turn(alice, dialog.id, "answered")
    ids["commits"]["completed"] = storage.commit_turn(
        dialog.id, "w1", epoch, start.inbox_id, [answer(start, "Sure")], outcome="completed"
    )
    ids["completed"] = start.inbox_id
    epoch, start = run_turn(alice, dialog.id, "not saved")
    assert storage.abandon_turn(dialog.id, "w1", epoch, start.inbox_id, NOT_SAVED)
    ids["abandoned"] = start.inbox_id
    _, start = run_turn(alice, dialog.id, "lost")
    ids["interrupted"] = start.inbox_id
    Dialog.objects.filter(pk=dialog.id).update(lease_expires_at=now_ms() - 1)
    observed = Dialog.objects.values_list("lease_owner", "lease_expires_at").get(pk=dialog.id)
    epoch = storage.claim_lease(dialog.id, "w2", LEASE_MS, takeover=observed)
    assert [t["inbox_id"] for t in storage.interrupt_started(dialog.id, "w2", epoch)] == [start.inbox_id]
    ids["interrupted_commit"] = storage.interrupted_commit(start.inbox_id)
    storage.accept_message(alice, CHANNEL, CHAT, "running", session_id=dialog.id)
    ids["running"] = storage.start_next_turn(dialog.id, "w2", epoch).inbox_id
    ids["queued"] = storage.accept_message(alice, CHANNEL, CHAT, "queued", session_id=dialog.id).inbox_id
    return ids


EXPECTED = {
    "failed": {"status": "failed", "error": FAILED},
    "cancelled": {"status": "cancelled", "error": "stopped"},
    "completed": None,
    "abandoned": {"status": "failed", "error": NOT_SAVED},
    "interrupted": {"status": "interrupted", "error": TURN_INTERRUPTED_ERROR},
    "running": None,
}


def test_a_history_page_shows_each_user_rows_outcome(alice, endings):
    page = storage.history_page(alice, endings["dialog"])
    users = {m["id"]: m["outcome"] for m in page["messages"] if m["role"] == "user"}
    assert users == {endings[name]: outcome for name, outcome in EXPECTED.items()}
    assert endings["queued"] not in users, "a queued message is not in history yet"
    assert all(m["outcome"] is None for m in page["messages"] if m["role"] != "user")


def test_a_history_page_reads_the_outcomes_in_one_query(alice, endings):
    empty = storage.create_dialog(alice, CHANNEL, CHAT)
    with CaptureQueriesContext(connection) as without_users:
        storage.history_page(alice, empty.id)
    with CaptureQueriesContext(connection) as full:
        storage.history_page(alice, endings["dialog"])
    with CaptureQueriesContext(connection) as one_row:
        storage.history_page(alice, endings["dialog"], limit=1)
    assert len(full) == len(without_users) + 1
    assert len(one_row) == len(full), "the same cost for one user row and for six"


def test_turn_committed_rows_carry_the_outcome_of_their_user_row(endings):
    for name in ("failed", "cancelled", "completed"):
        user = endings["commits"][name].messages[0]
        assert (user["id"], user["role"], user["outcome"]) == (endings[name], "user", EXPECTED[name])
    cancelled = endings["commits"]["cancelled"].messages
    assert [m["outcome"] for m in cancelled[1:]] == [None]
    interrupted = endings["interrupted_commit"].messages
    assert [(m["id"], m["outcome"]) for m in interrupted] == [
        (endings["interrupted"], EXPECTED["interrupted"])
    ]


def test_the_reconcile_read_carries_the_outcome_of_the_user_row(endings):
    names = ("failed", "cancelled", "completed", "abandoned", "interrupted", "running")
    states = storage.turn_states(CHANNEL, CHAT, [endings[n] for n in names], [])
    by_inbox = {s["inbox_id"]: s for s in states}
    for name in names:
        state = by_inbox[endings[name]]
        if name == "running":
            assert "messages" not in state
            continue
        user = state["messages"][0]
        assert (user["id"], user["outcome"]) == (endings[name], EXPECTED[name])


def test_an_interrupted_row_stores_the_words_its_snapshot_showed(endings):
    row = InboxMessage.objects.get(pk=endings["interrupted"])
    assert (row.status, row.outcome, row.error) == ("interrupted", "failed", TURN_INTERRUPTED_ERROR)
    assert Message.objects.filter(pk=endings["interrupted"], role="user").exists()
