"""Edge cases of stops, commits and commands: stops no worker can answer or that land while a
turn is being set up, a commit that storage refuses (told once, never as a restart), commands'
argument parsing, titles with format characters, and messages of deleted dialogs."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from django.db import OperationalError

from conversations import storage
from conversations.chat import stops
from conversations.models import Dialog, InboxMessage
from conversations.runtime.turn_sinks import open_cli_chat_sink
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]


@database_sync_to_async
def leave_a_started_turn(session_id: str, owner: str = "dead-host:serve") -> str:
    """A turn whose process died: its row reads ``started``, its owner's lease is still valid."""
    user = Dialog.objects.get(pk=session_id).owner
    storage.accept_message(user, "cli_chat", str(user.pk), "lost", client_msg_id="lost-1")
    epoch = storage.claim_lease(session_id, owner, 60_000)
    return storage.start_next_turn(session_id, owner, epoch).turn_id


async def test_stop_of_a_turn_no_live_worker_runs_is_answered(connect, start_worker, monkeypatch):
    monkeypatch.setattr(stops, "STOP_ACK_SECONDS", 0.3)
    await start_worker(ScriptedProvider([]))  # a live worker, but not the dialog's (dead) owner
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await leave_a_started_turn(session_id)
    await client.send({"type": "stop", "session_id": session_id})
    notice = await client.until("notification")
    assert notice["level"] == "warning" and "No server is running that turn" in notice["content"]
    assert notice["session_id"] == session_id


async def test_a_stop_acknowledged_by_the_owner_gets_no_extra_notice(connect, start_worker, monkeypatch):
    monkeypatch.setattr(stops, "STOP_ACK_SECONDS", 0.3)
    await start_worker(ScriptedProvider([script_text(" ".join(["w"] * 400))], delay=0.01))
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "talk", "client_msg_id": "ack-1"})
    turn = (await client.until("turn_updated", lambda f: bool(f["turn"]["blocks"])))["turn"]
    await client.send({"type": "stop", "session_id": turn["session_id"]})
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "cancelled"
    await client.until("turn_committed")
    assert await client.communicator.receive_nothing(timeout=0.6)
    assert not client.of_type("notification")


async def test_a_stop_while_the_turn_is_being_set_up_is_not_lost(connect, start_worker):
    """The row reads ``started`` before the agent loop exists; a stop in that window still cancels."""
    opening, release = asyncio.Event(), asyncio.Event()

    async def slow_sink(start):
        opening.set()
        await release.wait()
        return await open_cli_chat_sink(start)

    provider = ScriptedProvider([script_text("should never be asked")])
    worker = await start_worker(provider, sink_factory=slow_sink)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "hi", "client_msg_id": "setup-1"})
    ack = await client.until("ack")
    await asyncio.wait_for(opening.wait(), 10)
    assert worker.stop_turn(ack["session_id"]) is True
    release.set()
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert (final["turn"]["status"], final["turn"]["error"]) == ("cancelled", "stopped")


async def test_a_commit_storage_refuses_is_reported_once_and_never_as_a_restart(
    connect, start_worker, monkeypatch
):
    failing = {"on": True}
    real_commit, real_abandon = storage.commit_turn, storage.abandon_turn

    def commit(*args, **kwargs):
        if failing["on"]:
            raise OperationalError("disk I/O error")
        return real_commit(*args, **kwargs)

    def abandon(*args, **kwargs):
        if failing["on"]:
            raise OperationalError("disk I/O error")
        return real_abandon(*args, **kwargs)

    monkeypatch.setattr(storage, "commit_turn", commit)
    monkeypatch.setattr(storage, "abandon_turn", abandon)
    token = await make_token()
    await start_worker(ScriptedProvider([script_text("lost answer"), script_text("saved answer")]))
    client = await connect(token)
    await client.until("ready")
    await client.send({"type": "message", "content": "first", "client_msg_id": "cf-1"})
    failed = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert failed["turn"]["status"] == "failed" and "could not be saved" in failed["turn"]["error"]
    notice = await client.until("notification")
    assert notice["level"] == "error" and "not saved" in notice["content"]
    failing["on"] = False

    # The row the failed abandon left ``started`` is cleaned up by the next owner without a notice.
    @database_sync_to_async
    def statuses() -> list[str]:
        return list(InboxMessage.objects.values_list("status", flat=True))

    for _ in range(100):
        if await statuses() == ["interrupted"]:
            break
        await client.communicator.receive_nothing(timeout=0.1)
    assert await statuses() == ["interrupted"]
    await client.send({"type": "message", "content": "second", "client_msg_id": "cf-2"})
    committed = await client.until("turn_committed")
    assert [m["content"] for m in committed["messages"]] == ["second", "saved answer"]
    assert len(client.of_type("notification")) == 1, [f["content"] for f in client.of_type("notification")]
    late = await connect(token)
    await late.until("ready")
    assert await late.communicator.receive_nothing(timeout=0.3), "no restart notice on a new connection"


async def test_command_arguments_split_on_any_whitespace_and_leading_space_is_a_command(
    connect, start_worker
):
    provider = ScriptedProvider([])
    await start_worker(provider)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "/rename\tFamily 👨‍👩‍👧 trip"})
    assert (await client.until("session_changed"))["title"] == "Family 👨‍👩‍👧 trip"
    await client.send({"type": "message", "content": "  /RENAME\u00a0می‌خواهم"})
    assert (await client.until("session_changed"))["title"] == "می‌خواهم"
    await client.send({"type": "message", "content": "\n/help"})
    assert "/switch" in (await client.until("notification"))["content"]
    await client.send({"type": "message", "content": "/rename bad\x00title"})
    assert (await client.until("error"))["code"] == "invalid_command"
    await client.send({"type": "message", "content": "/" + "x" * 5000})
    error = await client.until("error")
    assert error["code"] == "unknown_command" and len(error["message"]) < 200
    await client.send({"type": "message", "content": "/switch " + "y" * 20000})
    error = await client.until("error")
    assert error["code"] == "not_found" and len(error["message"]) < 200
    assert provider.requests == []


async def test_a_deleted_dialogs_message_is_not_acked_again_and_its_queue_drop_is_told(connect, start_worker):
    opening, release = asyncio.Event(), asyncio.Event()

    async def held_sink(start):
        opening.set()
        await release.wait()
        return await open_cli_chat_sink(start)

    await start_worker(ScriptedProvider([script_text("a")]), sink_factory=held_sink)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "one", "client_msg_id": "dd-1"})
    await client.until("ack")
    await asyncio.wait_for(opening.wait(), 10)  # "one" has started: only "two" stays queued
    await client.send({"type": "message", "content": "two", "client_msg_id": "dd-2"})
    await client.until("ack", lambda f: f["client_msg_id"] == "dd-2")
    await client.send({"type": "message", "content": "/delete"})
    await client.until("session_changed", lambda f: f.get("deleted"))
    dropped = await client.until("notification", lambda f: "will not run" in f["content"])
    assert dropped["content"].startswith("1 queued message")
    release.set()
    await client.send({"type": "message", "content": "two", "client_msg_id": "dd-2"})
    error = await client.until("error", lambda f: f.get("client_msg_id") == "dd-2")
    assert error["code"] == "not_found"


async def test_info_names_the_dialogs_model_preset(connect, start_worker):
    # Dialog.model is the dialog's preset name ("" = the default): /info names the preset and
    # its provider/model label, whatever vendor model id the provider reports (issue 17).
    await start_worker(ScriptedProvider([script_text("hi")], model="model-b"))
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "hello", "client_msg_id": "im-1"})
    await client.until("turn_committed")
    await client.send({"type": "message", "content": "/info"})
    notice = await client.until("notification")
    assert notice["info"]["model"] == "default" and notice["info"]["model_label"] == "default (replay)"
    assert "model: default (replay)" in notice["content"]
