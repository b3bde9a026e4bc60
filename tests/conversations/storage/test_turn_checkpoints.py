"""Turn checkpoints in storage: saved only for the lease holder's started turn, committed once as
the ``interrupted`` answer when a takeover interrupts the turn (``storage.checkpoints``)."""

from __future__ import annotations

import pytest

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.context.history import row_to_message
from conversations.models import Dialog, InboxMessage, Message, now_ms

pytestmark = [pytest.mark.django_db]

LEASE_MS = 15_000


def started_turn(content: str = "tell me") -> tuple[int, storage.TurnStart]:
    user, _ = get_or_create_user("alice")
    accepted = storage.accept_message(user, "cli_chat", str(user.pk), content)
    epoch = storage.claim_lease(accepted.session_id, "w1", LEASE_MS)
    return epoch, storage.start_next_turn(accepted.session_id, "w1", epoch)


def checkpoint(text: str, reasoning: str = "") -> dict:
    return {"text": text, "reasoning": reasoning, "iteration": 0, "revision": 7, "at": now_ms()}


def save(epoch: int, start: storage.TurnStart, cp: dict, worker: str = "w1") -> int:
    return storage.write_checkpoints(
        worker, [storage.CheckpointWrite(start.dialog_id, epoch, start.inbox_id, cp)]
    )


def take_over(dialog_id: str) -> tuple[int, list[dict]]:
    Dialog.objects.filter(pk=dialog_id).update(lease_expires_at=now_ms() - 1)
    observed = Dialog.objects.values_list("lease_owner", "lease_expires_at").get(pk=dialog_id)
    epoch = storage.claim_lease(dialog_id, "w2", LEASE_MS, takeover=observed)
    return epoch, storage.interrupt_started(dialog_id, "w2", epoch)


def test_a_checkpoint_is_saved_only_by_the_lease_holder_on_a_started_row():
    epoch, start = started_turn()
    assert save(epoch, start, checkpoint("word0 word1")) == 1
    assert InboxMessage.objects.get(pk=start.inbox_id).checkpoint["text"] == "word0 word1"
    assert save(epoch, start, checkpoint("stale"), worker="w9") == 0
    assert save(epoch + 1, start, checkpoint("stale")) == 0
    assert InboxMessage.objects.get(pk=start.inbox_id).checkpoint["text"] == "word0 word1"


def test_an_interrupted_turn_commits_its_checkpoint_once_as_an_interrupted_answer():
    epoch, start = started_turn()
    save(epoch, start, checkpoint("word0 word1 word2", reasoning="thinking\u0000"))
    _, interrupted = take_over(start.dialog_id)
    assert [t["inbox_id"] for t in interrupted] == [start.inbox_id]

    rows = list(Message.objects.filter(dialog_id=start.dialog_id).order_by("seq"))
    assert [(r.role, r.seq) for r in rows] == [("user", 1), ("assistant", 2)]
    answer = rows[1]
    assert str(answer.id) == start.reply_message_id and str(answer.turn_id) == start.turn_id
    assert answer.content == "word0 word1 word2" and answer.reasoning_content == "thinking\ufffd"
    assert answer.completion_status == Message.CompletionStatus.INTERRUPTED
    dialog = Dialog.objects.get(pk=start.dialog_id)
    assert dialog.history_revision == 2 and dialog.total_message_count == 2
    inbox = InboxMessage.objects.get(pk=start.inbox_id)
    assert inbox.checkpoint is None and inbox.status == InboxMessage.Status.INTERRUPTED

    committed = storage.interrupted_commit(start.inbox_id)
    assert [m["role"] for m in committed.messages] == ["user", "assistant"]
    assert committed.messages[0]["outcome"]["status"] == "interrupted"
    assert committed.messages[1]["outcome"] is None
    assert committed.messages[1]["completion_status"] == "interrupted"
    assert committed.history_revision == 2

    # A second recovery (another takeover) finds nothing started: no second row.
    assert take_over(start.dialog_id)[1] == []
    assert Message.objects.filter(dialog_id=start.dialog_id).count() == 2


def test_the_reply_id_never_gets_a_second_row():
    epoch, start = started_turn()
    save(epoch, start, checkpoint("shown"))
    # A row with the reply id already exists (the turn's own answer): the checkpoint adds none.
    Message.objects.create(
        id=start.reply_message_id,
        dialog_id=start.dialog_id,
        seq=2,
        role=Message.Role.ASSISTANT,
        content="committed",
        turn_id=start.turn_id,
    )
    Dialog.objects.filter(pk=start.dialog_id).update(history_revision=2)
    take_over(start.dialog_id)
    assert list(Message.objects.filter(dialog_id=start.dialog_id).values_list("content", flat=True)) == [
        "tell me",
        "committed",
    ]


def test_a_normal_commit_clears_the_checkpoint_and_a_later_takeover_adds_nothing():
    epoch, start = started_turn()
    save(epoch, start, checkpoint("partial"))
    storage.commit_turn(
        start.dialog_id,
        "w1",
        epoch,
        start.inbox_id,
        [{"id": start.reply_message_id, "role": "assistant", "content": "full", "turn_id": start.turn_id}],
        outcome="completed",
    )
    assert InboxMessage.objects.get(pk=start.inbox_id).checkpoint is None
    assert save(epoch, start, checkpoint("late")) == 0, "a save that lands after the commit writes nothing"
    assert take_over(start.dialog_id)[1] == []
    assert Message.objects.filter(dialog_id=start.dialog_id, role="assistant").count() == 1


def test_a_turn_without_a_checkpoint_or_with_blank_text_keeps_only_its_user_row():
    epoch, start = started_turn()
    save(epoch, start, checkpoint("  \n"))
    take_over(start.dialog_id)
    assert Message.objects.filter(dialog_id=start.dialog_id).count() == 1
    assert [m["role"] for m in storage.interrupted_commit(start.inbox_id).messages] == ["user"]


def test_the_next_request_sends_the_interrupted_text_back_and_leaves_reasoning_alone_out():
    epoch, start = started_turn()
    save(epoch, start, checkpoint("the answer so far", reasoning="hm"))
    new_epoch, _ = take_over(start.dialog_id)
    history = storage.load_history(start.dialog_id, "w2", new_epoch).history
    sent = row_to_message(history[1])
    assert sent is not None and sent.role == "assistant" and sent.text == "the answer so far"

    # Reasoning alone is kept on the row (as a stopped turn keeps it) and never sent back.
    user, _ = get_or_create_user("alice")
    storage.accept_message(user, "cli_chat", str(user.pk), "again", session_id=start.dialog_id)
    second = storage.start_next_turn(start.dialog_id, "w2", new_epoch)
    save(new_epoch, second, checkpoint("", reasoning="only thinking"), worker="w2")
    last_epoch, _ = take_over(start.dialog_id)
    history = storage.load_history(start.dialog_id, "w2", last_epoch).history
    assert [(r["role"], r["content"], r["completion_status"]) for r in history[2:]] == [
        ("user", "again", "completed"),
        ("assistant", "", "interrupted"),
    ]
    assert history[3]["reasoning"] == "only thinking"
    assert row_to_message(history[3]) is None
