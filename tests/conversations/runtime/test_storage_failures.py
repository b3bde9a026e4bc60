"""Storage failures that outlast the retries (seed 004 §4.4, §8): told, never lost, served from memory."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from conversations import storage
from conversations.runtime.sessions import session_manager
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]


async def test_a_failing_turn_start_alerts_once_keeps_the_message_and_runs_it_later(
    connect, start_worker, monkeypatch
):
    real_start = storage.start_next_turn
    calls = []

    def broken_start(*args, **kwargs):
        calls.append(args)
        raise OperationalError("database is locked")

    monkeypatch.setattr(storage, "start_next_turn", broken_start)
    await start_worker(ScriptedProvider([script_text("Finally.")]))
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "hello?", "client_msg_id": "sf-1"})
    ack = await client.until("ack")
    alert = await client.until("notification")
    assert (
        alert["level"] == "error"
        and "Nothing you sent is lost" in alert["content"]
        and "ref" in alert["content"]
    )
    assert alert["session_id"] == ack["session_id"]
    assert "database is locked" not in alert["content"], "raw errors stay in the log"
    retried = len(calls)
    assert retried >= 4, "the first try and three retries before the alert (seed 004 §4.4)"
    # The inbox scan keeps trying; the chat is not flooded with alerts meanwhile.
    while len(calls) < 3 * retried:
        await client.communicator.receive_nothing(timeout=0.1)
    assert not [f for f in client.frames if f["type"] == "notification" and f is not alert]
    monkeypatch.setattr(storage, "start_next_turn", real_start)
    committed = await client.until("turn_committed", timeout=15)
    assert [m["content"] for m in committed["messages"]] == ["hello?", "Finally."]


async def test_history_is_served_from_memory_when_the_database_read_fails(connect, start_worker, monkeypatch):
    await start_worker(ScriptedProvider([script_text("Remembered.")]))
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await client.send({"type": "message", "content": "keep this", "client_msg_id": "mem-1"})
    committed = await client.until("turn_committed")
    assert session_id in session_manager()

    def broken_page(*args, **kwargs):
        raise OperationalError("disk I/O error")

    monkeypatch.setattr(storage, "history_page", broken_page)
    await client.send({"type": "history", "session_id": session_id})
    page = await client.until("session_history")
    assert [m["id"] for m in page["messages"]] == [m["id"] for m in committed["messages"]]
    assert page["history_revision"] == committed["history_revision"]
    # Another chat's id, or a dialog not in memory, is not answered from memory.
    await client.send({"type": "history", "session_id": "cli_chat:999:nope"})
    assert (await client.until("error"))["code"] == "internal_error"
