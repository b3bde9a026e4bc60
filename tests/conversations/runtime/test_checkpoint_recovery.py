"""A dead process's turn keeps what it showed: its checkpoint becomes the turn's ``interrupted``
answer when a worker takes the dialog over, in the takeover's ``turn_committed`` and in history
(``storage.checkpoints``, PROTOCOL §1 "History message")."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.models import Dialog, now_ms
from providers.testing import ScriptedProvider
from tests.conversations.conftest import make_token
from tests.conversations.runtime.test_restart_notices import (
    DEAD_WORKER,
    barrier,
    leave_a_started_turn,
    until_interrupted,
)

pytestmark = [pytest.mark.django_db(transaction=True)]

SHOWN = " ".join(f"word{n}" for n in range(13))


def leave_a_checkpointed_turn() -> dict:
    """A turn a dead process left ``started`` after saving what it showed; sync (DB thread)."""
    turn = leave_a_started_turn()
    epoch = Dialog.objects.get(pk=turn["session_id"]).lease_epoch
    checkpoint = {"text": SHOWN, "reasoning": "Counting.", "iteration": 0, "revision": 14, "at": now_ms()}
    written = storage.write_checkpoints(
        DEAD_WORKER, [storage.CheckpointWrite(turn["session_id"], epoch, turn["inbox_id"], checkpoint)]
    )
    assert written == 1
    return turn


async def test_a_takeover_commits_the_shown_text_and_history_keeps_it_marked_interrupted(
    connect, start_worker
):
    turn = await database_sync_to_async(leave_a_checkpointed_turn)()
    token = await make_token()
    early = await connect(token)
    await early.until("ready")
    await start_worker(ScriptedProvider([]))
    await until_interrupted(turn["turn_id"])
    committed = await early.until("turn_committed", lambda f: f["session_id"] == turn["session_id"])
    assert [(m["role"], m["content"]) for m in committed["messages"]] == [
        ("user", "lost"),
        ("assistant", SHOWN),
    ]
    assert committed["history_revision"] == 2

    for client in (early, await connect(token)):
        await client.send({"type": "history", "session_id": turn["session_id"]})
        history = (await client.until("session_history"))["messages"]
        user, answer = history
        assert user["id"] == turn["inbox_id"] and user["outcome"]["status"] == "interrupted"
        assert answer["id"] == turn["message_id"] and answer["turn_id"] == turn["turn_id"]
        assert (answer["role"], answer["content"], answer["reasoning"]) == ("assistant", SHOWN, "Counting.")
        assert answer["completion_status"] == "interrupted" and answer["outcome"] is None
        await barrier(client)
    assert len(early.of_type("turn_committed")) == 1, "committed and announced once"
