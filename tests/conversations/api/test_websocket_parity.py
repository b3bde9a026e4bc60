"""REST and WebSocket are one system (PROTOCOL §1–§2): a message sent over REST is the
same operation as a WebSocket ``message`` — the same inbox row, the same turn run by the same
agent worker, the same snapshots reaching every WebSocket client of the chat — and dialog changes
made over REST are announced to those clients like the slash commands announce theirs.

The API is called with ``ninja.testing.TestAsyncClient`` on the test's event loop, where the
agent worker and the WebSocket communicators run too (the embedded ``serve`` layout).
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from conversations.models import InboxMessage
from conversations.runtime.supervisor import control_supervisor, reset_control_supervisor
from providers.testing import ScriptedProvider, script_text
from tests.conversations.api.conftest import ApiClient

pytestmark = [pytest.mark.django_db(transaction=True)]


@database_sync_to_async
def inbox_row(message_id: str) -> InboxMessage:
    return InboxMessage.objects.get(pk=message_id)


async def ws_and_api(connect, alice: ApiClient):
    """alice's WebSocket (``ready`` received) and her active dialog's id."""
    ws = await connect(alice.token)
    ready = await ws.until("ready")
    return ws, ready["active_session_id"]


async def test_a_rest_message_is_the_same_operation_as_a_websocket_message(connect, start_worker, alice):
    await start_worker(ScriptedProvider([script_text("Hello from REST"), script_text("Hello from WS")]))
    ws, sid = await ws_and_api(connect, alice)

    response = await alice.post(
        f"/dialogs/{sid}/messages", json={"content": "hi over REST", "client_msg_id": "m-1"}
    )
    assert response.status_code == 202
    accepted = response.json()
    committed = await ws.until("turn_committed")
    assert committed["session_id"] == sid
    user_row, answer = committed["messages"]
    assert (user_row["role"], user_row["content"], user_row["id"]) == (
        "user",
        "hi over REST",
        accepted["message_id"],
    )
    assert answer["role"] == "assistant" and answer["content"].strip() == "Hello from REST"
    updates = [f["turn"] for f in ws.of_type("turn_updated")]
    assert updates and updates[-1]["status"] == "completed" and updates[-1]["message_id"] == answer["id"]
    assert all(u["session_id"] == sid for u in updates)
    assert not ws.of_type("ack"), "the REST caller got the acknowledgement, not the WebSocket"

    # The same message over the WebSocket: an inbox row of the same kind, a turn of the same kind.
    await ws.send({"type": "message", "content": "hi over WS", "session_id": sid, "client_msg_id": "m-2"})
    ack = await ws.until("ack")
    second = await ws.until("turn_committed", lambda f: f["messages"][0]["id"] == ack["message_id"])
    assert second["history_revision"] == 4
    rest_row, ws_row = await inbox_row(accepted["message_id"]), await inbox_row(ack["message_id"])
    for row in (rest_row, ws_row):
        assert row.status == InboxMessage.Status.DONE and row.dialog_id == sid
    assert rest_row.source == ws_row.source, "same sender, channel and kind"
    assert (rest_row.user_id, rest_row.channel_context) == (ws_row.user_id, ws_row.channel_context)

    # One idempotency space: a client_msg_id used over REST is a duplicate on the WebSocket too.
    await ws.send({"type": "message", "content": "again", "session_id": sid, "client_msg_id": "m-1"})
    again = await ws.until("ack", lambda f: f["client_msg_id"] == "m-1")
    assert again["message_id"] == accepted["message_id"]
    duplicate = await alice.post(
        f"/dialogs/{sid}/messages", json={"content": "again", "client_msg_id": "m-2"}
    )
    assert duplicate.status_code == 202 and duplicate.json()["message_id"] == ack["message_id"]
    assert duplicate.json()["duplicate"] is True

    # History over REST is the WebSocket's session_history.
    await ws.send({"type": "history", "session_id": sid})
    ws_history = await ws.until("session_history")
    rest_history = (await alice.get(f"/dialogs/{sid}/messages")).json()
    assert rest_history == {
        k: ws_history[k] for k in ("session_id", "history_revision", "messages", "has_more")
    }
    assert [m["seq"] for m in rest_history["messages"]] == [1, 2, 3, 4]
    newest = (await alice.get(f"/dialogs/{sid}/messages?limit=2")).json()
    assert [m["seq"] for m in newest["messages"]] == [3, 4] and newest["has_more"] is True
    older = (await alice.get(f"/dialogs/{sid}/messages?limit=2&before_seq=3")).json()
    assert [m["seq"] for m in older["messages"]] == [1, 2] and older["has_more"] is False

    info = (await alice.get(f"/dialogs/{sid}")).json()
    assert (info["message_count"], info["total_message_count"], info["history_revision"]) == (2, 4, 4)
    assert (info["queued"], info["running"]) == (0, False) and info["usage"]["output_tokens"] > 0


async def test_the_running_turns_snapshot_and_stop(connect, start_worker, alice):
    await start_worker(ScriptedProvider([script_text("word " * 400)], delay=0.02))
    ws, sid = await ws_and_api(connect, alice)
    accepted = (await alice.post(f"/dialogs/{sid}/messages", json={"content": "talk slowly"})).json()
    live = await ws.until(
        "turn_updated", lambda f: f["turn"]["phase"] == "responding" and f["turn"]["blocks"]
    )

    response = await alice.get(f"/dialogs/{sid}/turn")
    assert response.status_code == 200
    turn = response.json()
    assert (turn["id"], turn["session_id"], turn["status"]) == (live["turn"]["id"], sid, "running")
    assert turn["revision"] >= live["turn"]["revision"] >= 1, "the worker's live snapshot, not a placeholder"
    assert turn["blocks"][0]["type"] == "assistant" and turn["blocks"][0]["text"].startswith("word")
    info = (await alice.get(f"/dialogs/{sid}")).json()
    assert info["running"] is True

    stop = await alice.post(f"/dialogs/{sid}/stop")
    assert stop.status_code == 202
    assert stop.json()["acknowledged"] is True and stop.json()["status"] == "stopping"
    cancelled = await ws.until("turn_updated", lambda f: f["turn"]["status"] == "cancelled")
    assert cancelled["turn"]["id"] == turn["id"]
    committed = await ws.until("turn_committed")
    assert committed["messages"][0]["id"] == accepted["message_id"]
    assert committed["messages"][-1]["completion_status"] == "cancelled"
    for _ in range(50):  # the inbox row is finished with the commit
        if (await alice.get(f"/dialogs/{sid}/turn")).status_code == 404:
            break
        await asyncio.sleep(0.05)
    assert (await alice.get(f"/dialogs/{sid}/turn")).json()["code"] == "no_running_turn"
    assert (await alice.post(f"/dialogs/{sid}/stop")).json()["code"] == "not_running"


async def test_dialog_changes_reach_the_chats_websocket_clients(connect, alice, bob):
    ws, first = await ws_and_api(connect, alice)
    bob_ws = await connect(bob.token)
    await bob_ws.until("ready")

    created = (await alice.post("/dialogs", json={"title": "From REST"})).json()
    changed = await ws.until("session_changed")
    assert (changed["session_id"], changed["title"], changed["active"]) == (
        created["session_id"],
        "From REST",
        True,
    )
    welcome = await ws.until("notification")
    assert welcome["session_id"] == created["session_id"]

    await alice.patch(f"/dialogs/{created['session_id']}", json={"title": "Renamed"})
    renamed = await ws.until("session_changed")
    assert (renamed["session_id"], renamed["title"], renamed["active"]) == (
        created["session_id"],
        "Renamed",
        True,
    )

    await alice.post(f"/dialogs/{first}/activate")
    switched = await ws.until("session_changed")
    assert (switched["session_id"], switched["active"]) == (first, True)

    assert (await alice.delete(f"/dialogs/{first}")).status_code == 204
    deleted = await ws.until("session_changed")
    assert (deleted["session_id"], deleted.get("deleted"), deleted["active"]) == (first, True, False)
    successor = await ws.until("session_changed")
    assert (successor["session_id"], successor["active"]) == (created["session_id"], True)

    assert await bob_ws.communicator.receive_nothing(timeout=0.2), "alice's changes never reach bob's chat"


@pytest.fixture
def fresh_control_supervisor():
    """A control supervisor bound to this test's event loop, forgotten afterwards."""
    reset_control_supervisor()
    yield control_supervisor()
    reset_control_supervisor()


async def test_compact_runs_in_the_background_and_notifies_the_chat(
    connect, start_worker, alice, settings, fresh_control_supervisor
):
    settings.PICOBOT = settings.PICOBOT.replace(compact_keep_messages=1)
    await start_worker(
        ScriptedProvider(
            [
                script_text("First answer."),
                script_text("Second answer."),
                script_text("Summary: the user said hi twice."),
            ]
        )
    )
    ws, sid = await ws_and_api(connect, alice)
    for text in ("hi", "hi again"):
        accepted = (await alice.post(f"/dialogs/{sid}/messages", json={"content": text})).json()
        await ws.until("turn_committed", lambda f, mid=accepted["message_id"]: f["messages"][0]["id"] == mid)

    response = await alice.post(f"/dialogs/{sid}/compact")
    assert response.status_code == 202
    assert response.json() == {"session_id": sid, "status": "started", "message": response.json()["message"]}
    notice = await ws.until("notification", lambda f: f.get("session_id") == sid)
    assert notice["level"] == "info"
    assert await fresh_control_supervisor.drain(timeout=5)
    info = (await alice.get(f"/dialogs/{sid}")).json()
    assert info["compacted_through_seq"] == 2, "u1 and a1 are summarised; u2, a2 stay verbatim"
