"""A stop targets the turn running when it was asked; a compaction runs once per dialog at a time
(a repeated stop must not cancel the next queued turn; 15 ``/compact`` must not be 15 paid
summary calls).
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.api import live, turns
from conversations.chat import commands
from conversations.models import Dialog, InboxMessage, Message
from conversations.runtime.agent_channel import request_stop
from conversations.runtime.provider import set_provider
from conversations.runtime.supervisor import control_supervisor, reset_control_supervisor
from conversations.runtime.turn_sinks import open_cli_chat_sink
from providers.testing import ScriptedProvider, script_text
from tests.conversations.api.conftest import ApiClient

pytestmark = [pytest.mark.django_db(transaction=True)]


async def ws_and_api(connect, alice: ApiClient):
    ws = await connect(alice.token)
    ready = await ws.until("ready")
    return ws, ready["active_session_id"]


@database_sync_to_async
def assistant_statuses(session_id: str) -> list[tuple[str, str]]:
    """``(user content, completion status of its final answer)`` per turn, in order."""
    rows = list(
        Message.objects.filter(dialog_id=session_id)
        .order_by("seq")
        .values_list("role", "content", "completion_status")
    )
    turns: list[tuple[str, str]] = []
    for role, content, status in rows:
        if role == "user":
            turns.append((content, ""))
        elif role == "assistant":
            turns[-1] = (turns[-1][0], status)
    return turns


async def two_turns_first_running(connect, start_worker, alice):
    """Two long turns queued in one dialog, the first streaming: ``(ws, session_id, first turn id)``."""
    await start_worker(ScriptedProvider([script_text("word " * 300), script_text("more " * 300)], delay=0.01))
    ws, sid = await ws_and_api(connect, alice)
    first = (await alice.post(f"/dialogs/{sid}/messages", json={"content": "first"})).json()["message_id"]
    await alice.post(f"/dialogs/{sid}/messages", json={"content": "second"})
    await ws.until("turn_updated", lambda f: f["turn"]["blocks"])
    return ws, sid, await turn_of(first)


@database_sync_to_async
def claimed_at(session_id: str) -> int | None:
    """The dialog's manual-compaction claim stamp (ms), or None when free."""
    return Dialog.objects.values_list("compaction_claimed_at", flat=True).get(pk=session_id)


@database_sync_to_async
def turn_of(message_id: str) -> str:
    return str(InboxMessage.objects.get(pk=message_id).turn_id)


async def test_two_stops_at_once_cancel_only_the_running_turn_never_the_next(connect, start_worker, alice):
    slow = script_text("word " * 400)
    await start_worker(
        ScriptedProvider([slow, script_text("second answer"), script_text("third answer")], delay=0.01)
    )
    ws, sid = await ws_and_api(connect, alice)
    ids = []
    for text in ("first", "second", "third"):
        ids.append(
            (await alice.post(f"/dialogs/{sid}/messages", json={"content": text})).json()["message_id"]
        )
    await ws.until("turn_updated", lambda f: f["turn"]["phase"] == "responding" and f["turn"]["blocks"])
    first_turn = await turn_of(ids[0])

    one, two = await asyncio.gather(alice.post(f"/dialogs/{sid}/stop"), alice.post(f"/dialogs/{sid}/stop"))
    for answer in (one, two):
        if answer.status_code == 202:
            assert answer.json()["turn_id"] == first_turn, "a stop names the turn it stopped"
        else:
            assert (answer.status_code, answer.json()["code"]) == (409, "not_running")
    # Either request may win the race; at least one stopped the turn and was acknowledged.
    stopped = [answer for answer in (one, two) if answer.status_code == 202]
    assert stopped and all(answer.json()["acknowledged"] is True for answer in stopped)

    await ws.until("turn_committed", lambda f: f["messages"][0]["id"] == ids[2], timeout=20)
    assert await assistant_statuses(sid) == [
        ("first", "cancelled"),
        ("second", "completed"),
        ("third", "completed"),
    ], "only the turn running when the stops were asked was cancelled"


async def test_a_late_repeat_of_a_stop_does_not_cancel_the_turn_being_set_up(connect, start_worker, alice):
    """The old bug exactly: the repeated stop reached the worker between two turns and was kept as
    a pending cancel, which then hit the next turn the moment it started."""
    opening, release = asyncio.Event(), asyncio.Event()
    sinks = 0

    async def second_sink_waits(start):
        nonlocal sinks
        sinks += 1
        if sinks == 2:
            opening.set()
            await release.wait()
        return await open_cli_chat_sink(start)

    worker = await start_worker(
        ScriptedProvider([script_text("word " * 400), script_text("second answer")], delay=0.01),
        sink_factory=second_sink_waits,
    )
    ws, sid = await ws_and_api(connect, alice)
    first = (await alice.post(f"/dialogs/{sid}/messages", json={"content": "first"})).json()["message_id"]
    second = (await alice.post(f"/dialogs/{sid}/messages", json={"content": "second"})).json()["message_id"]
    await ws.until("turn_updated", lambda f: f["turn"]["phase"] == "responding" and f["turn"]["blocks"])
    first_turn = await turn_of(first)
    stop = await alice.post(f"/dialogs/{sid}/stop")
    assert stop.status_code == 202 and stop.json()["acknowledged"] is True
    await asyncio.wait_for(opening.wait(), 10)  # turn 2 started (its row), its loop not yet

    # The same stop again (a double click, a retry) — only now reaching the worker.
    assert worker.stop_turn(sid, first_turn) is None, "between turns: only the row can tell"
    await request_stop(sid, turn_id=first_turn)
    await asyncio.sleep(0.3)  # the worker reads the row: turn 1 ended, nothing to stop
    assert worker.executors[sid].pending_cancel is None
    release.set()
    done = await ws.until("turn_committed", lambda f: f["messages"][0]["id"] == second, timeout=20)
    assert done["messages"][-1]["completion_status"] == "completed"
    assert await assistant_statuses(sid) == [("first", "cancelled"), ("second", "completed")]


async def test_a_websocket_stop_may_name_its_turn_and_another_turn_is_not_stopped(
    connect, start_worker, alice
):
    await start_worker(ScriptedProvider([script_text("word " * 300)], delay=0.01))
    ws, sid = await ws_and_api(connect, alice)
    await ws.send({"type": "message", "content": "talk", "session_id": sid, "client_msg_id": "s-1"})
    live_turn = (await ws.until("turn_updated", lambda f: f["turn"]["blocks"]))["turn"]["id"]

    await ws.send({"type": "stop", "session_id": sid, "turn_id": "0" * 8 + "-0000-0000-0000-" + "0" * 12})
    notice = await ws.until("notification")
    assert notice["content"] == "That turn is not running any more." and notice["session_id"] == sid
    await ws.send({"type": "stop", "session_id": sid, "turn_id": live_turn})
    final = await ws.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert (final["turn"]["id"], final["turn"]["status"]) == (live_turn, "cancelled")
    await ws.send({"type": "stop", "session_id": sid, "turn_id": 5})
    assert (await ws.until("error"))["code"] == "invalid_frame"


async def test_no_running_server_is_said_only_while_that_turn_still_reads_started(alice, monkeypatch):
    """Unacknowledged because the turn just ended: 409 ``not_running``, not "no server runs it"."""
    monkeypatch.setattr(turns, "STOP_ACK_SECONDS", 0.1)
    sid = (await alice.post("/dialogs")).json()["session_id"]
    accepted = (await alice.post(f"/dialogs/{sid}/messages", json={"content": "hello"})).json()

    @database_sync_to_async
    def set_status(status: str) -> None:
        InboxMessage.objects.filter(pk=accepted["message_id"]).update(
            status=status,
            turn_id="6f0c2b1e-8f7a-4a4e-9d7e-2b7c1f0e9a11",
            reply_message_id=accepted["message_id"],
        )

    await set_status(InboxMessage.Status.STARTED)

    async def ended_meanwhile(session_id: str, turn_id: str, timeout: float) -> bool:
        assert turn_id == "6f0c2b1e-8f7a-4a4e-9d7e-2b7c1f0e9a11"
        await set_status(InboxMessage.Status.DONE)
        return False

    monkeypatch.setattr(live, "stop_turn", ended_meanwhile)
    response = await alice.post(f"/dialogs/{sid}/stop")
    assert (response.status_code, response.json()["code"]) == (409, "not_running")
    assert "already ended" in response.json()["message"]


# --- compaction: one at a time per dialog ----------------------------------------------------------


@pytest.fixture
def blocked_compaction(monkeypatch):
    """``compact_dialog`` replaced by one that counts its calls and waits for ``release``."""
    reset_control_supervisor()
    state = {"calls": 0, "release": asyncio.Event()}

    class Outcome:
        notice = "Compacted."

    async def compact_dialog(dialog_id, provider, **_):
        state["calls"] += 1
        await state["release"].wait()
        return Outcome()

    monkeypatch.setattr("conversations.context.compaction_service.compact_dialog", compact_dialog)
    set_provider(ScriptedProvider([]))  # a model that could summarise (not the offline replay)
    yield state
    set_provider(None)
    reset_control_supervisor()


async def test_fifteen_compact_requests_make_one_summary_call(alice, blocked_compaction):
    sid = (await alice.post("/dialogs")).json()["session_id"]
    answers = [await alice.post(f"/dialogs/{sid}/compact") for _ in range(15)]
    assert answers[0].status_code == 202
    assert {(a.status_code, a.json()["code"]) for a in answers[1:]} == {(409, "compaction_running")}
    await asyncio.sleep(0.05)
    assert blocked_compaction["calls"] == 1
    other = (await alice.post("/dialogs")).json()["session_id"]
    assert (await alice.post(f"/dialogs/{other}/compact")).status_code == 202, "per dialog"

    blocked_compaction["release"].set()
    assert await control_supervisor().drain(timeout=5)
    assert await claimed_at(sid) is None, "released when done"
    assert (await alice.post(f"/dialogs/{sid}/compact")).status_code == 202, "done: may run again"
    assert await control_supervisor().drain(timeout=5)
    assert blocked_compaction["calls"] == 3


async def test_a_second_slash_compact_is_told_one_is_running(connect, alice, blocked_compaction):
    ws, sid = await ws_and_api(connect, alice)
    await ws.send({"type": "message", "content": "/compact"})
    await asyncio.sleep(0.05)
    await ws.send({"type": "message", "content": "/compact"})
    notice = await ws.until("notification")
    assert notice["level"] == "info" and notice["session_id"] == sid
    assert "a compaction of this dialog is already running" in notice["content"].lower()
    # REST and WebSocket share the dialog's claim.
    assert (await alice.post(f"/dialogs/{sid}/compact")).json()["code"] == "compaction_running"
    assert blocked_compaction["calls"] == 1
    blocked_compaction["release"].set()
    done = await ws.until("notification")
    assert done["content"] == "Compacted."


async def test_a_compaction_claimed_by_another_process_is_respected_until_it_goes_stale(
    alice, blocked_compaction
):
    """The claim lives in the dialog row: what another server process claimed binds this one; the
    claim of a process that died (older than the bound) is taken over."""
    sid = (await alice.post("/dialogs")).json()["session_id"]
    claim = database_sync_to_async(storage.claim_compaction)
    stamp = await claim(sid, commands.compaction_claim_ms())  # "the other process"
    assert stamp is not None
    refused = await alice.post(f"/dialogs/{sid}/compact")
    assert (refused.status_code, refused.json()["code"]) == (409, "compaction_running")
    assert blocked_compaction["calls"] == 0

    @database_sync_to_async
    def age_claim(ms: int) -> None:
        Dialog.objects.filter(pk=sid).update(compaction_claimed_at=stamp - ms)

    await age_claim(commands.compaction_claim_ms() + 1)  # its process died long ago
    assert (await alice.post(f"/dialogs/{sid}/compact")).status_code == 202
    blocked_compaction["release"].set()
    assert await control_supervisor().drain(timeout=5)
    assert blocked_compaction["calls"] == 1
    assert await claimed_at(sid) is None, "released when done"


async def test_a_repeated_stop_is_recognised_from_the_row_whichever_process_took_the_first(
    connect, start_worker, alice
):
    """The first stop was taken by another server process (only its row mark is shared): a repeat
    here, after that turn ended and the next began, stops nothing."""
    ws, sid, first_turn = await two_turns_first_running(connect, start_worker, alice)
    # "The other process": it marks the row and asks the owning worker, nothing in this process.
    await database_sync_to_async(storage.note_stop_requested)(sid, first_turn)
    await request_stop(sid, turn_id=first_turn)
    second_turn = (
        await ws.until("turn_updated", lambda f: f["turn"]["id"] != first_turn and f["turn"]["blocks"])
    )["turn"]["id"]

    again = await alice.post(f"/dialogs/{sid}/stop")
    assert again.status_code == 202 and again.json()["turn_id"] == first_turn
    await asyncio.sleep(0.2)
    assert (await alice.get(f"/dialogs/{sid}/turn")).json()["id"] == second_turn, "the next turn still runs"
    stop = await alice.post(f"/dialogs/{sid}/stop", query_params={"turn_id": second_turn})
    assert stop.status_code == 202
    await ws.until(
        "turn_updated", lambda f: f["turn"]["id"] == second_turn and f["turn"]["status"] != "running"
    )
    assert await assistant_statuses(sid) == [("first", "cancelled"), ("second", "cancelled")]


async def test_a_typed_slash_stop_stops_the_turn_running_now_even_right_after_another_stop(
    connect, start_worker, alice
):
    """The repeat rule is for stop frames (a double click); a ``/stop`` the user typed after seeing
    the next turn start means that turn."""
    ws, sid, first_turn = await two_turns_first_running(connect, start_worker, alice)
    await ws.send({"type": "stop", "session_id": sid})
    second_turn = (
        await ws.until("turn_updated", lambda f: f["turn"]["id"] != first_turn and f["turn"]["blocks"])
    )["turn"]["id"]
    await ws.send({"type": "message", "content": "/stop", "session_id": sid})
    final = await ws.until(
        "turn_updated", lambda f: f["turn"]["id"] == second_turn and f["turn"]["status"] != "running"
    )
    assert final["turn"]["status"] == "cancelled"
    assert await assistant_statuses(sid) == [("first", "cancelled"), ("second", "cancelled")]


async def test_the_same_stop_again_after_its_turn_ended_is_answered_not_applied_to_the_next(
    connect, start_worker, alice
):
    ws, sid, first_turn = await two_turns_first_running(connect, start_worker, alice)
    stopped = (await alice.post(f"/dialogs/{sid}/stop")).json()
    assert (stopped["turn_id"], stopped["acknowledged"]) == (first_turn, True)
    second_turn = (
        await ws.until("turn_updated", lambda f: f["turn"]["id"] != first_turn and f["turn"]["blocks"])
    )["turn"]["id"]

    again = await alice.post(f"/dialogs/{sid}/stop")  # a retry of the first stop, seconds later
    assert again.status_code == 202 and again.json() == stopped, "the same answer; nothing else stopped"
    assert_not_running = await alice.post(f"/dialogs/{sid}/stop", query_params={"turn_id": first_turn})
    assert (assert_not_running.status_code, assert_not_running.json()["code"]) == (409, "not_running")
    await ws.send({"type": "stop", "session_id": sid})  # a double click on the WebSocket too
    notice = await ws.until("notification")
    assert (notice["content"], notice["turn_id"]) == ("That turn was already stopped.", first_turn)
    await asyncio.sleep(0.2)
    assert (await alice.get(f"/dialogs/{sid}/turn")).json()["id"] == second_turn, "still running"

    explicit = await alice.post(f"/dialogs/{sid}/stop", query_params={"turn_id": second_turn})
    assert explicit.status_code == 202 and explicit.json()["turn_id"] == second_turn
    final = await ws.until(
        "turn_updated", lambda f: f["turn"]["id"] == second_turn and f["turn"]["status"] != "running"
    )
    assert final["turn"]["status"] == "cancelled"
