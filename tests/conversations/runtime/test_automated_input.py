"""Automated input (issue 18): a scheduled prompt's run or a task notification enters the inbox
like a user message, queues behind a running turn, is marked in history and delivered final-only."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.agent.automated_input import (
    SCHEDULE,
    TASK_NOTIFICATION,
    automated_source,
    is_automated,
    origin_of,
)
from conversations.models import Dialog, now_ms
from conversations.runtime.agent_channel import wake_dialog
from conversations.storage.shapes import NotFoundError
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token

ORIGIN = {"kind": SCHEDULE, "ref": "7", "label": "Daily report"}


def test_automated_source_names_its_kind_and_shortens_the_label():
    source = automated_source(TASK_NOTIFICATION, ref=12, label="  summarise\n the   logs " + "x" * 300)
    assert source["kind"] == TASK_NOTIFICATION and source["ref"] == "12"
    assert source["label"].startswith("summarise the logs x") and len(source["label"]) == 120
    assert origin_of(source) == {"kind": TASK_NOTIFICATION, "ref": "12", "label": source["label"]}
    with pytest.raises(ValueError, match="unknown automated input kind"):
        automated_source("user_input", ref="1", label="x")


@pytest.mark.parametrize(
    "source",
    [None, {}, "schedule", [], {"kind": "user_input", "from_channel": "cli_chat"}, {"kind": 3}],
)
def test_a_person_s_message_or_a_malformed_source_has_no_origin(source):
    assert origin_of(source) is None and not is_automated(source)


accept = database_sync_to_async(storage.accept_automated)


@pytest.mark.django_db(transaction=True)
async def test_automated_input_runs_final_only_and_is_marked_in_history(connect, start_worker):
    # Many slow chunks: a live turn would publish running snapshots.
    await start_worker(ScriptedProvider([script_text(" ".join(f"w{i}" for i in range(60)))], delay=0.01))
    client = await connect(await make_token())
    ready = await client.until("ready")
    session = ready["active_session_id"]
    source = automated_source(SCHEDULE, ref="7", label="Daily report")
    accepted = await accept(session, "Summarise the news", source)
    assert accepted.session_id == session and not accepted.duplicate
    await wake_dialog(session)
    committed = await client.until("turn_committed")
    updates = client.of_type("turn_updated")
    assert updates and all(f["turn"]["status"] != "running" for f in updates)
    assert updates[-1]["turn"]["status"] == "completed"
    user, answer = committed["messages"][0], committed["messages"][-1]
    assert (user["content"], user["origin"]) == ("Summarise the news", ORIGIN)
    assert answer["origin"] is None and answer["content"].startswith("w0 w1")
    await client.send({"type": "history", "session_id": session})
    page = await client.until("session_history")
    assert [m["origin"] for m in page["messages"]] == [ORIGIN, None]


@pytest.mark.django_db(transaction=True)
async def test_automated_input_queues_behind_the_running_turn(connect, start_worker):
    provider = ScriptedProvider([script_text("first " * 40), script_text("second")], delay=0.01)
    await start_worker(provider)
    client = await connect(await make_token())
    ready = await client.until("ready")
    session = ready["active_session_id"]
    await client.send({"type": "message", "content": "hello", "client_msg_id": "q-1"})
    await client.until("turn_updated", lambda f: f["turn"]["status"] == "running")
    await accept(session, "Background job done", automated_source(TASK_NOTIFICATION, ref="t1", label="job"))
    await wake_dialog(session)
    first = await client.until("turn_committed")
    second = await client.until("turn_committed")
    assert [m["content"] for m in first["messages"]][0] == "hello"
    assert second["messages"][0]["content"] == "Background job done"
    assert second["messages"][0]["origin"]["kind"] == TASK_NOTIFICATION
    assert second["messages"][-1]["content"] == "second"


@pytest.mark.django_db(transaction=True)
def test_a_deleted_dialog_takes_no_automated_input():
    from conversations.auth.tokens import get_or_create_user

    user, _ = get_or_create_user("bob")
    dialog = Dialog.objects.create(
        id="cli_chat:bob:d1",
        channel="cli_chat",
        chat_id="bob",
        dialog_id="d1",
        owner=user,
        deleted_at=now_ms(),
    )
    with pytest.raises(NotFoundError):
        storage.accept_automated(dialog.id, "x", automated_source(SCHEDULE, ref="1", label="x"))
    with pytest.raises(NotFoundError):
        storage.accept_automated("cli_chat:bob:nope", "x", automated_source(SCHEDULE, ref="1", label="x"))


@pytest.mark.django_db(transaction=True)
async def test_a_client_joining_during_an_automated_turn_gets_no_running_snapshot(connect, start_worker):
    import asyncio

    from conversations.models import InboxMessage

    await start_worker(ScriptedProvider([script_text(" ".join(f"w{i}" for i in range(80)))], delay=0.01))
    token = await make_token()
    first = await connect(token)
    session = (await first.until("ready"))["active_session_id"]
    accepted = await accept(session, "Nightly digest", automated_source(SCHEDULE, ref="7", label="digest"))
    await wake_dialog(session)
    started = database_sync_to_async(
        lambda: InboxMessage.objects.filter(id=accepted.inbox_id, status="started").exists()
    )
    for _ in range(200):
        if await started():
            break
        await asyncio.sleep(0.01)
    late = await connect(token)
    ready = await late.until("ready")
    assert [r["session_id"] for r in ready["running"]] == [session]
    await late.until("turn_committed")
    assert all(f["turn"]["status"] != "running" for f in late.of_type("turn_updated"))
