"""Durable "interrupted by a restart" notices at the consumer level (DESIGN §3 InboxMessage).

A dead process's ``started`` row is faked like ``test_chat_flow`` does (a claim by another worker
id whose lease then expired). When the test worker takes the dialog over it marks the row
``interrupted`` and broadcasts a terminal ``failed`` snapshot + a warning to the chat's group (best
effort); ``InboxMessage.notice_sent_at`` stays NULL until a connecting client received the notice
on ``ready``, so later connections are not told again.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.models import Dialog, InboxMessage
from conversations.runtime.notify import INTERRUPTED_NOTICE, RECOVERY_REVISION, interrupted_notice_id
from providers.testing import ScriptedProvider
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]

DEAD_WORKER = "dead-host:serve"


def leave_a_started_turn(username: str = "alice", content: str = "lost") -> dict:
    """A turn a dead process left ``started`` (its lease expired); sync, call in a DB thread."""
    user, _ = get_or_create_user(username)
    accepted = storage.accept_message(
        user, "cli_chat", str(user.pk), content, client_msg_id=f"{username}-{content}"
    )
    epoch = storage.claim_lease(accepted.session_id, DEAD_WORKER, 60_000)
    start = storage.start_next_turn(accepted.session_id, DEAD_WORKER, epoch)
    Dialog.objects.filter(pk=accepted.session_id).update(
        lease_expires_at=0
    )  # the dead process's lease ran out
    return {
        "turn_id": start.turn_id,
        "session_id": start.dialog_id,
        "message_id": start.reply_message_id,
        "inbox_id": start.inbox_id,
    }


def inbox_row(turn_id: str) -> InboxMessage:
    return InboxMessage.objects.get(turn_id=turn_id)


async def until_interrupted(turn_id: str, timeout: float = 10) -> InboxMessage:
    """Wait until the worker took the dialog over and marked the row interrupted."""
    async with asyncio.timeout(timeout):
        while True:
            row = await database_sync_to_async(inbox_row)(turn_id)
            if row.status == InboxMessage.Status.INTERRUPTED:
                return row
            await asyncio.sleep(0.02)


async def barrier(client) -> None:
    """Everything the server sent this connection so far has arrived (pings answer in order)."""
    await client.send({"type": "ping", "nonce": "barrier"})
    await client.until("pong")


def about(client, turn_id: str) -> tuple[list[dict], list[dict]]:
    """The ``turn_updated`` and ``notification`` frames a client got for ``turn_id``."""
    updates = [f for f in client.of_type("turn_updated") if f["turn"]["id"] == turn_id]
    notices = [f for f in client.of_type("notification") if f.get("turn_id") == turn_id]
    return updates, notices


def assert_told(client, turn: dict) -> None:
    """Exactly one terminal failed snapshot and one warning with the turn's notice id."""
    updates, notices = about(client, turn["turn_id"])
    assert len(updates) == 1, updates
    failed = updates[0]["turn"]
    assert failed["status"] == "failed" and failed["message_id"] == turn["message_id"]
    assert failed["session_id"] == turn["session_id"] and failed["revision"] >= RECOVERY_REVISION
    assert failed["error"]
    assert len(notices) == 1, notices
    assert notices[0] == {
        "type": "notification",
        "level": "warning",
        "content": INTERRUPTED_NOTICE,
        "session_id": turn["session_id"],
        "id": interrupted_notice_id(turn["turn_id"]),
        "turn_id": turn["turn_id"],
    }


async def test_a_client_connecting_after_the_takeover_is_told_once_and_later_clients_are_not(
    connect, start_worker
):
    turn = await database_sync_to_async(leave_a_started_turn)()
    token = await make_token()
    await start_worker(ScriptedProvider([]))
    row = await until_interrupted(turn["turn_id"])
    assert row.notice_sent_at is None, "the broadcast found nobody: the notice is still pending"

    first = await connect(token)
    ready = await first.until("ready")
    assert ready["running"] == []
    await barrier(first)
    assert_told(first, turn)
    row = await database_sync_to_async(inbox_row)(turn["turn_id"])
    assert row.notice_sent_at is not None

    second = await connect(token)
    await second.until("ready")
    await barrier(second)
    assert about(second, turn["turn_id"]) == ([], [])


async def test_a_client_connected_before_the_takeover_hears_the_broadcast_with_the_same_notice_id(
    connect, start_worker
):
    turn = await database_sync_to_async(leave_a_started_turn)()
    token = await make_token()
    early = await connect(token)
    ready = await early.until("ready")
    # Still `started`: the client shows a running placeholder, not an interruption yet.
    assert [t["id"] for t in ready["running"]] == [turn["turn_id"]]

    await start_worker(ScriptedProvider([]))
    await early.until("notification", lambda f: f.get("turn_id") == turn["turn_id"])
    await barrier(early)
    assert_told(early, turn)  # the group broadcast, carrying the id ready-time delivery uses
    # The turn's user row was committed when it started: its turn_committed comes with the
    # failed snapshot, before the notice (and before any later turn's rows), once.
    committed = early.of_type("turn_committed")
    assert len(committed) == 1 and [m["id"] for m in committed[0]["messages"]] == [turn["inbox_id"]]
    assert committed[0]["session_id"] == turn["session_id"]
    assert committed[0]["history_revision"] == committed[0]["messages"][0]["seq"]
    order = [
        f["type"] for f in early.frames if f["type"] in {"turn_updated", "turn_committed", "notification"}
    ]
    assert order.index("turn_committed") > order.index("turn_updated")
    assert order.index("turn_committed") < order.index("notification")

    # The connection that sent the broadcast on marks the notice received: later connections
    # are not told again.
    for _ in range(200):
        if (await database_sync_to_async(inbox_row)(turn["turn_id"])).notice_sent_at is not None:
            break
        await asyncio.sleep(0.02)
    assert (await database_sync_to_async(inbox_row)(turn["turn_id"])).notice_sent_at is not None
    later = await connect(token)
    await later.until("ready")
    await barrier(later)
    assert about(later, turn["turn_id"]) == ([], [])
    await barrier(early)
    assert_told(early, turn)


async def test_a_storage_error_reading_the_interrupted_user_row_still_tells_the_chat(
    connect, start_worker, monkeypatch
):
    """The turn_committed is left to the connection's reconciler; snapshot and notice go out."""
    from django.db import DatabaseError

    def broken(inbox_id: str):
        raise DatabaseError("disk I/O error")

    monkeypatch.setattr(storage, "interrupted_commit", broken)
    turn = await database_sync_to_async(leave_a_started_turn)()
    early = await connect(await make_token())
    await early.until("ready")
    await start_worker(ScriptedProvider([]))
    await early.until("notification", lambda f: f.get("turn_id") == turn["turn_id"])
    await barrier(early)
    assert_told(early, turn)
    assert early.of_type("turn_committed") == [], "not from the broadcast: the reconciler sends it later"


async def test_notices_go_to_their_own_chat_only(connect, start_worker):
    alice_turn = await database_sync_to_async(leave_a_started_turn)("alice")
    bob_turn = await database_sync_to_async(leave_a_started_turn)("bob")
    await start_worker(ScriptedProvider([]))
    await until_interrupted(alice_turn["turn_id"])
    await until_interrupted(bob_turn["turn_id"])

    bob = await connect(await make_token("bob"))
    await bob.until("ready")
    await barrier(bob)
    assert_told(bob, bob_turn)
    assert about(bob, alice_turn["turn_id"]) == ([], [])
    alice = await connect(await make_token("alice"))
    await alice.until("ready")
    await barrier(alice)
    assert_told(alice, alice_turn)


async def test_a_failing_notice_lookup_leaves_the_connection_working_and_the_notice_pending(
    connect, start_worker, monkeypatch
):
    turn = await database_sync_to_async(leave_a_started_turn)()
    token = await make_token()
    await start_worker(ScriptedProvider([]))
    await until_interrupted(turn["turn_id"])

    def broken(channel: str, chat_id: str) -> list[dict]:
        raise RuntimeError("database on fire")

    monkeypatch.setattr(storage, "pending_interrupted_notices", broken)
    client = await connect(token)
    await client.until("ready")
    await barrier(client)
    assert about(client, turn["turn_id"]) == ([], [])
    monkeypatch.undo()
    retry = await connect(token)
    await retry.until("ready")
    await barrier(retry)
    assert_told(retry, turn)


def test_pending_notices_are_the_chats_unsent_interrupted_turns_of_live_dialogs():
    turn = leave_a_started_turn("alice", "one")
    user, _ = get_or_create_user("alice")
    chat_id = str(user.pk)
    assert storage.pending_interrupted_notices("cli_chat", chat_id) == [], "started is not interrupted"

    epoch = storage.claim_lease(turn["session_id"], "new-host:serve", 60_000, takeover=(DEAD_WORKER, 0))
    interrupted = storage.interrupt_started(turn["session_id"], "new-host:serve", epoch)
    pending = storage.pending_interrupted_notices("cli_chat", chat_id)
    assert pending == interrupted
    assert [p["inbox_id"] for p in pending] == [turn["inbox_id"]]
    assert storage.pending_interrupted_notices("cli_chat", "someone-else") == []
    assert storage.pending_interrupted_notices("feishu", chat_id) == []

    assert storage.mark_notices_sent([turn["inbox_id"]]) == 1
    first_mark = inbox_row(turn["turn_id"]).notice_sent_at
    assert storage.mark_notices_sent([turn["inbox_id"]]) == 0, "the first delivery time stays"
    assert inbox_row(turn["turn_id"]).notice_sent_at == first_mark
    assert storage.mark_notices_sent([]) == 0
    assert storage.pending_interrupted_notices("cli_chat", chat_id) == []

    # A soft-deleted dialog's interrupted turn is nothing to tell.
    InboxMessage.objects.filter(pk=turn["inbox_id"]).update(notice_sent_at=None)
    Dialog.objects.filter(pk=turn["session_id"]).update(deleted_at=1)
    assert storage.pending_interrupted_notices("cli_chat", chat_id) == []
