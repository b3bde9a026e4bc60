"""Storage service functions against the real (SQLite) test database (DESIGN §3, §5)."""

from __future__ import annotations

import json
import uuid

import pytest

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.models import Dialog, InboxMessage, Message, now_ms
from conversations.storage import sql

pytestmark = [pytest.mark.django_db]

CHANNEL = "cli_chat"
LEASE_MS = 15_000


@pytest.fixture
def alice():
    return get_or_create_user("alice")[0]


@pytest.fixture
def bob():
    return get_or_create_user("bob")[0]


@pytest.fixture
def dialog(alice) -> Dialog:
    return storage.active_dialog(alice, CHANNEL, "chat-alice")


def accept(owner, text: str, **kwargs) -> storage.AcceptedMessage:
    return storage.accept_message(owner, CHANNEL, f"chat-{owner.username}", text, **kwargs)


def expire_lease(dialog_id: str) -> None:
    Dialog.objects.filter(pk=dialog_id).update(lease_expires_at=now_ms() - 1)


def take_over(dialog_id: str, worker: str) -> int | None:
    """Another worker claims a lapsed lease as a scan observed it (``claim_lease(takeover=…)``)."""
    observed = Dialog.objects.values_list("lease_owner", "lease_expires_at").get(pk=dialog_id)
    return storage.claim_lease(dialog_id, worker, LEASE_MS, takeover=observed)


def fresh(dialog: Dialog) -> Dialog:
    return Dialog.objects.get(pk=dialog.pk)


def started_turn(
    owner, dialog: Dialog, text: str = "hello", worker: str = "w1"
) -> tuple[int, storage.TurnStart]:
    accept(owner, text, session_id=dialog.id)
    epoch = storage.claim_lease(dialog.id, worker, LEASE_MS)
    assert epoch is not None
    turn = storage.start_next_turn(dialog.id, worker, epoch)
    assert turn is not None
    return epoch, turn


# --- accept_message -------------------------------------------------------------------------------


def test_accepting_a_message_creates_one_queued_inbox_row_in_the_active_dialog(alice):
    accepted = accept(alice, "hello", client_msg_id="c-1", source={"kind": "user_input"})

    row = InboxMessage.objects.get()
    assert accepted == storage.AcceptedMessage(
        str(row.id), row.dialog_id, 0, False, created_dialog=row.dialog
    )
    assert row.dialog_id == storage.active_dialog(alice, CHANNEL, "chat-alice").id
    assert (row.content, row.status, row.position, row.client_msg_id) == ("hello", "queued", 1, "c-1")
    assert row.user == alice and row.source == {"kind": "user_input"}


def test_each_accepted_message_reports_how_many_messages_are_ahead_of_it(alice):
    counts = [accept(alice, f"m{i}").queued for i in range(3)]

    assert counts == [0, 1, 2]
    assert list(InboxMessage.objects.order_by("position").values_list("position", flat=True)) == [1, 2, 3]


def test_a_repeated_client_msg_id_returns_the_first_row_as_a_duplicate_and_creates_nothing(alice):
    first = accept(alice, "hello", client_msg_id="c-1")
    accept(alice, "next", client_msg_id="c-2")

    again = accept(alice, "hello again", client_msg_id="c-1")

    assert again == storage.AcceptedMessage(first.inbox_id, first.session_id, 0, True)
    assert InboxMessage.objects.count() == 2
    assert InboxMessage.objects.get(pk=first.inbox_id).content == "hello"


def test_a_concurrent_send_with_the_same_client_msg_id_is_answered_with_the_winning_row(alice, monkeypatch):
    # The other request inserts its row after our duplicate check but before our insert, so our
    # insert hits the unique constraint (the IntegrityError path).
    real_active_dialog = storage.active_dialog
    real_resolve = storage.resolve_dialog
    winner: list[storage.AcceptedMessage] = []

    def racing_resolve(owner, channel, chat_id, session_id=None):
        monkeypatch.setattr(storage.inbox, "resolve_dialog", real_resolve)  # race only once
        winner.append(accept(alice, "from the other tab", client_msg_id="c-race"))
        return real_resolve(owner, channel, chat_id, session_id)

    monkeypatch.setattr(storage.inbox, "resolve_dialog", racing_resolve)

    loser = accept(alice, "from this tab", client_msg_id="c-race")

    assert winner[0].duplicate is False
    assert loser == storage.AcceptedMessage(winner[0].inbox_id, winner[0].session_id, 0, True)
    assert list(InboxMessage.objects.values_list("content", flat=True)) == ["from the other tab"]
    assert fresh(real_active_dialog(alice, CHANNEL, "chat-alice")).inbox_position == 1


def test_two_users_may_use_the_same_client_msg_id(alice, bob):
    a = accept(alice, "from alice", client_msg_id="same")
    b = accept(bob, "from bob", client_msg_id="same")

    assert a.duplicate is False and b.duplicate is False
    assert a.inbox_id != b.inbox_id and a.session_id != b.session_id
    assert InboxMessage.objects.count() == 2


def test_a_message_to_another_users_dialog_is_not_found_and_not_stored(alice, bob, dialog):
    with pytest.raises(storage.NotFoundError):
        accept(bob, "sneaky", session_id=dialog.id)

    assert InboxMessage.objects.count() == 0


def test_a_message_to_a_deleted_dialog_is_not_found(alice, dialog):
    Dialog.objects.filter(pk=dialog.pk).update(deleted_at=now_ms())

    with pytest.raises(storage.NotFoundError):
        accept(alice, "hello?", session_id=dialog.id)

    assert InboxMessage.objects.count() == 0


def test_a_message_to_an_unknown_dialog_is_not_found(alice):
    with pytest.raises(storage.NotFoundError):
        accept(alice, "hello?", session_id="cli_chat:chat-alice:nope")


def test_the_33rd_queued_message_is_refused(alice, settings):
    settings.PICOBOT = settings.PICOBOT.replace(inbox_capacity=32)
    for i in range(32):
        accept(alice, f"m{i}")

    with pytest.raises(storage.InboxFullError):
        accept(alice, "one too many", client_msg_id="c-33")

    assert InboxMessage.objects.count() == 32
    assert not InboxMessage.objects.filter(client_msg_id="c-33").exists()
    # The refused send leaves no gap in the arrival positions.
    assert Dialog.objects.get().inbox_position == 32
    InboxMessage.objects.filter(position=1).update(status="done")
    assert InboxMessage.objects.get(pk=accept(alice, "fits now").inbox_id).position == 33


def test_a_full_inbox_accepts_again_once_a_queued_message_has_started(alice, dialog, settings):
    settings.PICOBOT = settings.PICOBOT.replace(inbox_capacity=2)
    accept(alice, "m1", session_id=dialog.id)
    accept(alice, "m2", session_id=dialog.id)
    with pytest.raises(storage.InboxFullError):
        accept(alice, "m3", session_id=dialog.id)

    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    storage.start_next_turn(dialog.id, "w1", epoch)
    accepted = accept(alice, "m3", session_id=dialog.id)

    # m1 is running and m2 is queued ahead of m3.
    assert accepted.queued == 2
    assert InboxMessage.objects.filter(status="queued").count() == 2


# --- dialogs ---------------------------------------------------------------------------------------


def test_active_dialog_creates_one_dialog_and_returns_the_same_one_later(alice):
    first = storage.active_dialog(alice, CHANNEL, "chat-x")
    second = storage.active_dialog(alice, CHANNEL, "chat-x")

    assert first.id == second.id == f"{CHANNEL}:chat-x:{first.dialog_id}"
    assert Dialog.objects.count() == 1
    assert (first.owner, first.title, first.title_is_default) == (alice, storage.DEFAULT_TITLE, True)


def test_active_dialog_of_another_chat_is_a_different_dialog(alice):
    assert (
        storage.active_dialog(alice, CHANNEL, "chat-x").id
        != storage.active_dialog(alice, CHANNEL, "chat-y").id
    )
    assert Dialog.objects.count() == 2


# --- lease ----------------------------------------------------------------------------------------


def test_the_first_claim_of_a_dialog_returns_epoch_1(dialog):
    assert storage.claim_lease(dialog.id, "w1", LEASE_MS) == 1

    row = fresh(dialog)
    assert row.lease_owner == "w1" and row.lease_epoch == 1
    assert now_ms() < row.lease_expires_at <= now_ms() + LEASE_MS


def test_a_second_worker_cannot_claim_a_live_lease(dialog):
    storage.claim_lease(dialog.id, "w1", LEASE_MS)

    assert storage.claim_lease(dialog.id, "w2", LEASE_MS) is None
    assert (fresh(dialog).lease_owner, fresh(dialog).lease_epoch) == ("w1", 1)


def test_a_second_worker_takes_an_expired_lease_with_a_higher_epoch(dialog):
    storage.claim_lease(dialog.id, "w1", LEASE_MS)
    expire_lease(dialog.id)

    assert storage.claim_lease(dialog.id, "w2", LEASE_MS) is None, "lapsed is not yet taken over"
    assert take_over(dialog.id, "w2") == 2
    assert fresh(dialog).lease_owner == "w2"


def test_a_takeover_fails_when_the_owner_renewed_after_it_was_observed(dialog):
    storage.claim_lease(dialog.id, "w1", LEASE_MS)
    expire_lease(dialog.id)
    observed = Dialog.objects.values_list("lease_owner", "lease_expires_at").get(pk=dialog.id)
    assert storage.renew_worker_leases("w1", LEASE_MS) == 1  # only late: the owner is alive

    assert storage.claim_lease(dialog.id, "w2", LEASE_MS, takeover=observed) is None
    assert (fresh(dialog).lease_owner, fresh(dialog).lease_epoch) == ("w1", 1)


def test_a_takeover_of_a_live_lease_fails_whatever_was_observed(dialog):
    storage.claim_lease(dialog.id, "w1", LEASE_MS)
    observed = Dialog.objects.values_list("lease_owner", "lease_expires_at").get(pk=dialog.id)

    assert storage.claim_lease(dialog.id, "w2", LEASE_MS, takeover=observed) is None


def test_renewing_a_workers_leases_renews_every_lease_it_owns_lapsed_ones_too(alice):
    ids = [storage.active_dialog(alice, CHANNEL, f"chat{i}").id for i in range(3)]
    for dialog_id in ids[:2]:
        storage.claim_lease(dialog_id, "w1", 1_000)
        expire_lease(dialog_id)
    storage.claim_lease(ids[2], "w2", 1_000)

    assert storage.renew_worker_leases("w1", LEASE_MS) == 2
    rows = dict(Dialog.objects.values_list("pk", "lease_expires_at"))
    assert all(rows[i] > now_ms() + LEASE_MS - 5_000 for i in ids[:2])
    assert rows[ids[2]] <= now_ms() + 1_000
    assert storage.lease_epochs(ids) == {ids[0]: ("w1", 1), ids[1]: ("w1", 1), ids[2]: ("w2", 1)}


def test_the_old_owner_cannot_start_a_turn_after_losing_the_lease(alice, dialog):
    accept(alice, "hello", session_id=dialog.id)
    old_epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    expire_lease(dialog.id)
    take_over(dialog.id, "w2")

    with pytest.raises(storage.LeaseLostError):
        storage.start_next_turn(dialog.id, "w1", old_epoch)

    assert InboxMessage.objects.get().status == "queued"
    assert Message.objects.count() == 0
    row = fresh(dialog)
    assert (row.history_revision, row.message_count, row.total_message_count) == (0, 0, 0)


def test_the_old_owner_cannot_commit_a_turn_after_losing_the_lease(alice, dialog):
    old_epoch, turn = started_turn(alice, dialog)
    expire_lease(dialog.id)
    take_over(dialog.id, "w2")

    with pytest.raises(storage.LeaseLostError):
        storage.commit_turn(
            dialog.id,
            "w1",
            old_epoch,
            turn.inbox_id,
            [{"role": "assistant", "content": "late"}],
            usage={"input_tokens": 10, "output_tokens": 5},
        )

    assert list(Message.objects.values_list("role", flat=True)) == ["user"]
    assert InboxMessage.objects.get().status == "started"
    row = fresh(dialog)
    assert (row.history_revision, row.total_message_count, row.usage_input_tokens) == (1, 1, 0)


def test_a_stale_epoch_of_the_same_worker_is_refused(alice, dialog):
    accept(alice, "hello", session_id=dialog.id)
    old_epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    assert storage.claim_lease(dialog.id, "w1", LEASE_MS) == old_epoch + 1

    with pytest.raises(storage.LeaseLostError):
        storage.start_next_turn(dialog.id, "w1", old_epoch)


def test_renewing_a_held_lease_extends_it(dialog):
    epoch = storage.claim_lease(dialog.id, "w1", 1_000)
    before = fresh(dialog).lease_expires_at

    assert storage.renew_worker_leases("w1", 60_000) == 1
    assert fresh(dialog).lease_expires_at >= before + 59_000
    assert storage.lease_epochs([dialog.id]) == {dialog.id: ("w1", epoch)}


def test_renewing_a_lost_lease_changes_nothing_and_its_epoch_tells_it_was_lost(dialog):
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    expire_lease(dialog.id)
    take_over(dialog.id, "w2")
    expires = fresh(dialog).lease_expires_at

    assert storage.renew_worker_leases("w1", 60_000) == 0
    assert fresh(dialog).lease_expires_at == expires
    assert storage.lease_epochs([dialog.id]) == {dialog.id: ("w2", epoch + 1)}, "the keeper reports w1's loss"


def test_releasing_a_lease_frees_it_and_the_next_claim_bumps_the_epoch(dialog):
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)

    assert storage.release_lease(dialog.id, "w1", epoch) is True
    row = fresh(dialog)
    assert (row.lease_owner, row.lease_expires_at, row.lease_epoch) == (None, None, 1)
    assert storage.claim_lease(dialog.id, "w2", LEASE_MS) == 2  # released: free for anyone


def test_releasing_a_lease_that_is_no_longer_ours_leaves_the_new_owner_in_place(dialog):
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    expire_lease(dialog.id)
    take_over(dialog.id, "w2")

    assert storage.release_lease(dialog.id, "w1", epoch) is False
    assert (fresh(dialog).lease_owner, fresh(dialog).lease_epoch) == ("w2", 2)


# --- turns ----------------------------------------------------------------------------------------


def test_starting_a_turn_moves_the_oldest_queued_message_into_history(alice, dialog):
    first = accept(alice, "one", session_id=dialog.id, source={"kind": "user_input"}, received_at=1234)
    accept(alice, "two", session_id=dialog.id)
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)

    turn = storage.start_next_turn(dialog.id, "w1", epoch)

    assert turn.inbox_id == first.inbox_id
    assert turn.user_message["id"] == first.inbox_id
    assert (turn.user_message["seq"], turn.user_message["role"], turn.user_message["content"]) == (
        1,
        "user",
        "one",
    )
    assert turn.user_message["created_at"] == 1234
    user_row = Message.objects.get()
    assert str(user_row.id) == first.inbox_id and str(user_row.turn_id) == turn.turn_id
    assert user_row.source == {"kind": "user_input"}
    inbox = InboxMessage.objects.get(pk=first.inbox_id)
    assert (inbox.status, str(inbox.turn_id), str(inbox.reply_message_id)) == (
        "started",
        turn.turn_id,
        turn.reply_message_id,
    )
    assert InboxMessage.objects.filter(status="queued").get().content == "two"
    assert [row["content"] for row in turn.history] == ["one"]
    assert "provider_state" in turn.history[0]
    row = fresh(dialog)
    assert (row.message_count, row.total_message_count, row.history_revision) == (1, 1, 1)


def test_turns_start_in_inbox_position_order_not_insertion_order(alice, dialog):
    later = InboxMessage.objects.create(user=alice, dialog=dialog, position=2, content="second")
    earlier = InboxMessage.objects.create(user=alice, dialog=dialog, position=1, content="first")
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)

    turn = storage.start_next_turn(dialog.id, "w1", epoch)

    assert turn.inbox_id == str(earlier.id)
    assert InboxMessage.objects.get(pk=later.pk).status == "queued"


def test_starting_a_turn_with_an_empty_inbox_returns_none_and_writes_nothing(dialog):
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)

    assert storage.start_next_turn(dialog.id, "w1", epoch) is None
    assert fresh(dialog).history_revision == 0


def test_a_turn_that_starts_after_a_committed_turn_gets_the_next_seq(alice, dialog):
    epoch, turn = started_turn(alice, dialog, "one")
    storage.commit_turn(dialog.id, "w1", epoch, turn.inbox_id, [{"role": "assistant", "content": "a1"}])
    accept(alice, "two", session_id=dialog.id)

    second = storage.start_next_turn(dialog.id, "w1", epoch)

    assert second.user_message["seq"] == 3
    assert [(r["seq"], r["content"]) for r in second.history] == [(1, "one"), (2, "a1"), (3, "two")]
    row = fresh(dialog)
    assert (row.message_count, row.total_message_count, row.history_revision) == (2, 3, 3)


def test_committing_a_turn_stores_its_rows_with_gap_free_seqs_in_one_go(alice, dialog):
    epoch, turn = started_turn(alice, dialog, "what time is it?")
    call = {"id": "call_1", "name": "current_time", "arguments": {}}
    rows = [
        {"role": "assistant", "content": "", "tool_calls": [call], "turn_id": turn.turn_id, "iteration": 0},
        {
            "role": "tool",
            "content": "10:42",
            "tool_call_id": "call_1",
            "tool_name": "current_time",
            "turn_id": turn.turn_id,
            "iteration": 0,
        },
        {
            "id": turn.reply_message_id,
            "role": "assistant",
            "content": "It is 10:42.",
            "turn_id": turn.turn_id,
            "iteration": 1,
        },
    ]

    result = storage.commit_turn(
        dialog.id, "w1", epoch, turn.inbox_id, rows, usage={"input_tokens": 120, "output_tokens": 30}
    )

    assert result.history_revision == 4
    assert [(m["seq"], m["role"]) for m in result.messages] == [
        (1, "user"),
        (2, "assistant"),
        (3, "tool"),
        (4, "assistant"),
    ]
    assert result.messages[0]["id"] == turn.inbox_id
    assert result.messages[1]["tool_calls"] == [call]
    assert result.messages[2]["tool_call_id"] == "call_1"
    assert result.messages[3]["id"] == turn.reply_message_id
    assert list(Message.objects.filter(dialog=dialog).order_by("seq").values_list("seq", flat=True)) == [
        1,
        2,
        3,
        4,
    ]
    inbox = InboxMessage.objects.get(pk=turn.inbox_id)
    assert inbox.status == "done" and inbox.finished_at is not None
    row = fresh(dialog)
    assert (row.history_revision, row.message_count, row.total_message_count) == (4, 1, 4)
    assert (row.usage_input_tokens, row.usage_output_tokens) == (120, 30)


def test_usage_of_successive_turns_is_summed(alice, dialog):
    epoch, turn = started_turn(alice, dialog, "one")
    storage.commit_turn(
        dialog.id, "w1", epoch, turn.inbox_id, [], usage={"input_tokens": 10, "output_tokens": 5}
    )
    accept(alice, "two", session_id=dialog.id)
    turn = storage.start_next_turn(dialog.id, "w1", epoch)
    storage.commit_turn(
        dialog.id, "w1", epoch, turn.inbox_id, [], usage={"input_tokens": 20, "output_tokens": 7}
    )

    row = fresh(dialog)
    assert (row.usage_input_tokens, row.usage_output_tokens) == (30, 12)


def test_a_failed_turn_commits_only_its_user_message_and_records_the_inbox_status(alice, dialog):
    epoch, turn = started_turn(alice, dialog)

    result = storage.commit_turn(
        dialog.id, "w1", epoch, turn.inbox_id, [], inbox_status=InboxMessage.Status.INTERRUPTED, error="boom"
    )

    assert [(m["seq"], m["role"]) for m in result.messages] == [(1, "user")]
    assert result.history_revision == 1
    inbox = InboxMessage.objects.get(pk=turn.inbox_id)
    assert (inbox.status, inbox.error) == ("interrupted", "boom")


def test_a_new_owner_marks_the_started_rows_of_a_dead_owner_interrupted(alice, dialog):
    _, turn = started_turn(alice, dialog, "running")
    queued = accept(alice, "waiting", session_id=dialog.id)
    expire_lease(dialog.id)
    epoch = take_over(dialog.id, "w2")

    interrupted = storage.interrupt_started(dialog.id, "w2", epoch)

    assert interrupted == [
        {
            "turn_id": turn.turn_id,
            "session_id": dialog.id,
            "message_id": turn.reply_message_id,
            "chat_id": dialog.chat_id,
            "channel": CHANNEL,
            "inbox_id": turn.inbox_id,
        }
    ]
    inbox = InboxMessage.objects.get(pk=turn.inbox_id)
    assert inbox.status == "interrupted" and inbox.finished_at is not None and inbox.error
    assert InboxMessage.objects.get(pk=queued.inbox_id).status == "queued"
    assert storage.interrupt_started(dialog.id, "w2", epoch) == []


def test_interrupting_with_a_stale_lease_is_refused(alice, dialog):
    old_epoch, turn = started_turn(alice, dialog)
    expire_lease(dialog.id)
    take_over(dialog.id, "w2")

    with pytest.raises(storage.LeaseLostError):
        storage.interrupt_started(dialog.id, "w1", old_epoch)

    assert InboxMessage.objects.get(pk=turn.inbox_id).status == "started"


# --- history --------------------------------------------------------------------------------------


def make_history(dialog: Dialog, count: int) -> None:
    for seq in range(1, count + 1):
        Message.objects.create(
            dialog=dialog, seq=seq, role="user" if seq % 2 else "assistant", content=f"m{seq}"
        )
    Dialog.objects.filter(pk=dialog.pk).update(history_revision=count)


def seqs(page: dict) -> list[int]:
    return [m["seq"] for m in page["messages"]]


def test_the_first_history_page_is_the_newest_rows_oldest_first(alice, dialog):
    make_history(dialog, 5)

    page = storage.history_page(alice, dialog.id, limit=2)

    assert seqs(page) == [4, 5]
    assert page["has_more"] is True
    assert (page["session_id"], page["history_revision"]) == (dialog.id, 5)
    assert [m["content"] for m in page["messages"]] == ["m4", "m5"]


def test_history_pages_walk_back_with_before_seq_until_nothing_is_left(alice, dialog):
    make_history(dialog, 5)

    middle = storage.history_page(alice, dialog.id, before_seq=4, limit=2)
    last = storage.history_page(alice, dialog.id, before_seq=2, limit=2)

    assert (seqs(middle), middle["has_more"]) == ([2, 3], True)
    assert (seqs(last), last["has_more"]) == ([1], False)


def test_a_page_that_ends_exactly_at_the_first_row_has_no_more(alice, dialog):
    make_history(dialog, 4)

    page = storage.history_page(alice, dialog.id, before_seq=3, limit=2)

    assert (seqs(page), page["has_more"]) == ([1, 2], False)


def test_another_users_history_is_not_found(alice, bob, dialog):
    make_history(dialog, 2)

    with pytest.raises(storage.NotFoundError):
        storage.history_page(bob, dialog.id)


def test_provider_state_never_reaches_the_protocol_form(alice, dialog):
    Message.objects.create(
        dialog=dialog, seq=1, role="assistant", content="hi", provider_state={"signature": "sig-secret"}
    )

    row = storage.message_to_protocol(Message.objects.get())
    page = storage.history_page(alice, dialog.id)

    assert "provider_state" not in row
    assert "sig-secret" not in json.dumps(row)
    assert "sig-secret" not in json.dumps(page)
    assert storage.message_to_history_row(Message.objects.get())["provider_state"] == {
        "signature": "sig-secret"
    }


# --- scanning for work ----------------------------------------------------------------------------


def test_dialogs_needing_work_lists_queued_dialogs_whose_lease_is_free_expired_or_ours(alice):
    def dialog_with_queued(chat: str) -> Dialog:
        d = storage.active_dialog(alice, CHANNEL, chat)
        storage.accept_message(alice, CHANNEL, chat, "hi", session_id=d.id)
        return d

    free = dialog_with_queued("free")
    ours = dialog_with_queued("ours")
    storage.claim_lease(ours.id, "me", LEASE_MS)
    expired = dialog_with_queued("expired")
    storage.claim_lease(expired.id, "other", LEASE_MS)
    expire_lease(expired.id)
    busy = dialog_with_queued("busy")
    storage.claim_lease(busy.id, "other", LEASE_MS)
    finished = dialog_with_queued("finished")
    InboxMessage.objects.filter(dialog=finished).update(status="done")
    storage.active_dialog(alice, CHANNEL, "empty")

    work = storage.dialogs_needing_work("me")
    assert sorted(d for d, _, _ in work) == sorted([free.id, ours.id, expired.id])
    assert {d: owner for d, owner, _ in work} == {free.id: None, ours.id: "me", expired.id: "other"}


def test_dialogs_needing_work_lists_a_dialog_once_however_many_rows_it_has(alice, dialog):
    for i in range(3):
        accept(alice, f"m{i}", session_id=dialog.id)

    assert [d for d, _, _ in storage.dialogs_needing_work("me")] == [dialog.id]


def test_a_worker_busy_with_its_own_dialogs_still_sees_a_dead_workers_lapsed_lease(alice):
    for i in range(3):
        own = storage.active_dialog(alice, CHANNEL, f"own{i}")
        storage.accept_message(alice, CHANNEL, f"own{i}", "hi", session_id=own.id)
        storage.claim_lease(own.id, "me", LEASE_MS)
    dead = storage.active_dialog(alice, CHANNEL, "dead")
    storage.accept_message(alice, CHANNEL, "dead", "hi", session_id=dead.id)
    storage.claim_lease(dead.id, "dead-worker", LEASE_MS)
    expire_lease(dead.id)

    work = storage.dialogs_needing_work("me", limit=2)
    assert [d for d, owner, _ in work if owner == "me"] and len(work) == 3
    assert work[-1][:2] == (dead.id, "dead-worker"), "the lapsed foreign lease is never crowded out"


def test_claiming_a_dialog_marks_its_interrupted_turns_or_leaves_them_to_the_caller(
    alice, dialog, monkeypatch
):
    from django.db import DatabaseError

    epoch, turn = started_turn(alice, dialog)
    expire_lease(dialog.id)
    observed = Dialog.objects.values_list("lease_owner", "lease_expires_at").get(pk=dialog.pk)
    claim = storage.claim_dialog(dialog.id, "w2", LEASE_MS, takeover=observed)
    assert claim.epoch == epoch + 1 and [t["turn_id"] for t in claim.interrupted] == [turn.turn_id]
    assert InboxMessage.objects.get(pk=turn.inbox_id).status == "interrupted"

    def broken(*args):
        raise DatabaseError("disk I/O error")

    monkeypatch.setattr(storage.turns, "interrupt_started", broken)
    claim = storage.claim_dialog(dialog.id, "w2", LEASE_MS)
    assert claim.epoch == epoch + 2 and claim.interrupted is None, "the executor tries again and alerts"
    assert storage.claim_dialog(dialog.id, "w3", LEASE_MS) is None, "a live lease of another worker"


def test_a_turn_start_reads_the_queued_rows_json_and_the_lease_check_the_whole_dialog(alice, dialog):
    """The hand-written reads (storage/sql.py): JSON columns decoded on both databases, UUIDs
    parsed, and fields they leave out (a BooleanField) loaded correctly on access."""
    storage.accept_message(
        alice,
        CHANNEL,
        f"chat-{alice.username}",
        "héllo 中文",
        session_id=dialog.id,
        media=[{"kind": "image", "ref": "m-1"}],
        source={"kind": "user_input", "note": "ü"},
        channel_context={"thread": "t-é", "n": 3},
    )
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    turn = storage.start_next_turn(dialog.id, "w1", epoch)
    assert turn.channel_context == {"thread": "t-é", "n": 3}
    assert turn.user_message["content"] == "héllo 中文"
    row = Message.objects.get(pk=turn.inbox_id)
    assert row.media_refs == [{"kind": "image", "ref": "m-1"}] and row.source == {
        "kind": "user_input",
        "note": "ü",
    }
    checked = storage.check_lease(dialog.id, "w1", epoch)
    assert checked.title_is_default is True and checked.history_revision == turn.history_revision


def test_an_ownerless_message_with_a_client_msg_id_is_accepted_once():
    first = storage.accept_message(None, CHANNEL, "system-chat", "one", client_msg_id="sys-1")
    again = storage.accept_message(None, CHANNEL, "system-chat", "one", client_msg_id="sys-1")
    assert again.duplicate and again.inbox_id == first.inbox_id and again.session_id == first.session_id
    assert InboxMessage.objects.filter(client_msg_id="sys-1").count() == 1


def test_the_hand_written_history_reads_equal_the_orm_rows(alice, dialog):
    """``sql.history_rows``/``history_row`` (a turn start's history, a commit's user row): the same
    dicts as ``message_to_history_row`` of the model instances, JSON, UUIDs and booleans included."""
    storage.accept_message(
        alice,
        CHANNEL,
        f"chat-{alice.username}",
        "find 中文",
        session_id=dialog.id,
        media=[{"kind": "image", "ref": "m-1"}],
    )
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    turn = storage.start_next_turn(dialog.id, "w1", epoch)
    rows = [
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "think ü",
            "iteration": 0,
            "tool_calls": [{"id": "c1", "name": "http_fetch", "arguments": {"url": "https://e.x/é"}}],
            "provider_state": {"signature": "s-1", "blocks": [1, None, "x"]},
            "turn_id": turn.turn_id,
        },
        {
            "role": "tool",
            "content": "oops",
            "tool_call_id": "c1",
            "tool_name": "http_fetch",
            "is_error": True,
            "iteration": 0,
            "turn_id": turn.turn_id,
        },
        {
            "role": "assistant",
            "content": "done",
            "iteration": 1,
            "completion_status": "completed",
            "turn_id": turn.turn_id,
        },
    ]
    result = storage.commit_turn(dialog.id, "w1", epoch, turn.inbox_id, rows)
    expected = [
        storage.message_to_history_row(m) for m in Message.objects.filter(dialog=dialog).order_by("seq")
    ]
    assert sql.history_rows(dialog.id, 0) == expected
    assert sql.history_rows(dialog.id, expected[1]["seq"]) == expected[2:]
    assert sql.history_row(turn.inbox_id) == expected[0] and sql.history_row(str(uuid.uuid4())) is None
    assert expected[2]["is_error"] is True and expected[0]["media_refs"] == [{"kind": "image", "ref": "m-1"}]
    assert result.messages[0] == storage.message_to_protocol(Message.objects.get(pk=turn.inbox_id))
