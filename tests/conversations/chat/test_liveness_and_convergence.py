"""Slow is not dead, and every connection converges (DESIGN §2, PROTOCOL §1).

- A process whose event loop is starved keeps its dialogs: its lease keeper renews from a thread
  of its own, and another worker takes over only a lease it saw lapsed and unrenewed.
- A commit slower than the lease (a storage lock held by another writer) is announced.
- A terminal snapshot or ``turn_committed`` the channel layer dropped reaches every connection
  that watched the turn, rebuilt from storage; a turn's plain fallback never follows its final.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import connection

from conversations.agent.tool_registry import Tool, ToolRegistry
from conversations.models import Dialog, InboxMessage
from conversations.runtime.notify import RECOVERY_REVISION
from providers.testing import ScriptedProvider, script_text, script_tool_call
from tests.conversations.conftest import make_token
from tests.conversations.runtime.test_delivery_fallback import Outbox, SinkFactory, settle

pytestmark = [pytest.mark.django_db(transaction=True)]

ANSWER = "Forty two, after a long wait."


@pytest.fixture
def short_leases(settings):
    """A 0.6 s lease renewed every 0.1 s: a block of a second or two outlives it several times."""
    settings.PICOBOT = settings.PICOBOT.replace(
        lease_seconds=0.6, lease_renew_seconds=0.1, inbox_scan_seconds=0.1
    )


@pytest.fixture
def quick_reconcile(settings):
    settings.PICOBOT = settings.PICOBOT.replace(reconcile_quiet_seconds=0.3)


@database_sync_to_async
def inbox_rows() -> list[tuple[str, str, str]]:
    return list(InboxMessage.objects.order_by("position").values_list("status", "outcome", "error"))


@database_sync_to_async
def lease_owner(session_id: str) -> str | None:
    return Dialog.objects.values_list("lease_owner", flat=True).get(pk=session_id)


def terminals(client) -> list[dict]:
    return [f["turn"] for f in client.of_type("turn_updated") if f["turn"]["status"] != "running"]


def answer_of(turn: dict) -> str:
    return "".join(b["text"] for b in turn["blocks"] if b["type"] == "assistant")


async def send(client, content: str = "question", msg_id: str = "m-1") -> dict:
    ready = await client.until("ready")
    await client.send({"type": "message", "content": content, "client_msg_id": msg_id})
    await client.until("ack")
    return ready


def loop_blocking_tool(seconds: float, entered: list[float]) -> ToolRegistry:
    """A badly written tool that blocks the whole event loop (a starved process)."""

    async def block(arguments: dict) -> str:
        entered.append(time.monotonic())
        time.sleep(seconds)  # noqa: ASYNC251 - the point: nothing else on this loop runs meanwhile
        return "done blocking"

    return ToolRegistry([Tool("block", "blocks", {"type": "object", "properties": {}}, block, timeout=60)])


async def test_a_starved_loop_that_misses_renewals_does_not_interrupt_its_own_turn(
    connect, start_worker, short_leases
):
    entered: list[float] = []
    provider = ScriptedProvider([script_tool_call("call_b", "block", {}), script_text(ANSWER)])
    owner = await start_worker(provider, worker_id="owner:serve", tools=loop_blocking_tool(2.0, entered))
    # Another live worker scans the same database all along and would take a lapsed lease over.
    await start_worker(ScriptedProvider([]), worker_id="other:serve")
    client = await connect(await make_token())
    ready = await send(client)
    renewals_before = owner.lease_keeper.renewals

    committed = await client.until("turn_committed", timeout=20)
    await settle(client)

    assert entered, "the tool blocked the loop for 2 s: more than three leases"
    assert owner.lease_keeper.renewals - renewals_before >= 5, "renewed from its own thread meanwhile"
    [final] = terminals(client)
    assert final["status"] == "completed" and answer_of(final) == ANSWER
    assert committed["messages"][-1]["content"] == ANSWER
    assert await inbox_rows() == [("done", "completed", "")]
    assert not [f for f in client.of_type("notification") if "interrupted" in f["content"]]
    assert await lease_owner(ready["active_session_id"]) in {"owner:serve", None}


def hold_sqlite_write_lock(path: str, seconds: float, held: threading.Event) -> threading.Thread:
    """Another writer takes the SQLite file's write lock for ``seconds`` (a long admin write)."""

    def hold() -> None:
        db = sqlite3.connect(path, timeout=30)
        db.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        db.rollback()
        db.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


@pytest.mark.skipif(connection.vendor != "sqlite", reason="holds a SQLite file lock")
async def test_a_commit_slower_than_the_lease_is_announced_when_the_storage_lock_is_released(
    connect, start_worker, short_leases
):
    gate = asyncio.Event()

    async def wait_for_gate(arguments: dict) -> str:
        await gate.wait()
        return "ready"

    tools = ToolRegistry(
        [Tool("wait", "waits", {"type": "object", "properties": {}}, wait_for_gate, timeout=60)]
    )
    provider = ScriptedProvider([script_tool_call("call_w", "wait", {}), script_text(ANSWER)])
    await start_worker(provider, worker_id="owner:serve", tools=tools)
    client = await connect(await make_token())
    await send(client)
    await client.until("turn_updated", lambda f: any(b["type"] == "tool" for b in f["turn"]["blocks"]))

    held = threading.Event()
    locker = hold_sqlite_write_lock(connection.settings_dict["NAME"], 2.5, held)
    assert await asyncio.to_thread(held.wait, 5)
    gate.set()  # the turn goes on and reaches its commit while the file is locked: > 4 leases
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running", timeout=30)
    committed = await client.until("turn_committed", timeout=10)
    await asyncio.to_thread(locker.join, 10)

    assert final["turn"]["status"] == "completed" and answer_of(final["turn"]) == ANSWER
    assert committed["messages"][-1]["content"] == ANSWER
    assert await inbox_rows() == [("done", "completed", "")]


class DroppingLayer:
    """Makes the process's channel layer drop the chosen group messages (a layer over capacity)."""

    def __init__(self, monkeypatch, drop) -> None:
        self.layer = get_channel_layer()
        self.inner = self.layer.group_send
        self.drop = drop
        self.dropped: list[dict] = []
        monkeypatch.setattr(self.layer, "group_send", self.group_send)

    async def group_send(self, group: str, message: dict) -> None:
        if group.startswith("chat") and self.drop(message):
            self.dropped.append(message)
            return
        await self.inner(group, message)


def is_end_frame(message: dict) -> bool:
    return bool(message.get("terminal") or message.get("committed_turn_id"))


async def test_a_dropped_terminal_and_turn_committed_reach_every_connection_that_watched_the_turn(
    connect, start_worker, monkeypatch, quick_reconcile
):
    layer = DroppingLayer(monkeypatch, is_end_frame)
    await start_worker(ScriptedProvider([script_text(ANSWER, reasoning="Thinking it over")], delay=0.005))
    token = await make_token()
    sender, watcher = await connect(token), await connect(token)
    await watcher.until("ready")
    await send(sender)

    for client in (sender, watcher):
        final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running", timeout=10)
        committed = await client.until("turn_committed", timeout=10)
        turn = final["turn"]
        assert turn["status"] == "completed" and answer_of(turn) == ANSWER
        assert [b["type"] for b in turn["blocks"]] == ["reasoning", "assistant"]
        assert turn["revision"] >= RECOVERY_REVISION, "above every live revision the client saw"
        assert [m["role"] for m in committed["messages"]] == ["user", "assistant"]
        assert committed["messages"][-1]["content"] == ANSWER
        assert committed["history_revision"] == committed["messages"][-1]["seq"]
    assert len(layer.dropped) == 2, "the live terminal and turn_committed were both dropped"
    for client in (sender, watcher):
        await settle(client)
        assert len(terminals(client)) == 1 and len(client.of_type("turn_committed")) == 1


async def test_a_connection_that_saw_nothing_of_its_turn_but_the_ack_still_gets_its_end(
    connect, start_worker, monkeypatch, quick_reconcile
):
    DroppingLayer(monkeypatch, lambda m: m.get("type") == "turn.snapshot" or m.get("committed_turn_id"))
    await start_worker(ScriptedProvider([script_text(ANSWER)]))
    client = await connect(await make_token())
    await send(client)
    final = await client.until("turn_updated", timeout=10)
    committed = await client.until("turn_committed", timeout=10)
    assert final["turn"]["status"] == "completed" and answer_of(final["turn"]) == ANSWER
    assert committed["messages"][0]["role"] == "user" and committed["messages"][-1]["content"] == ANSWER


async def test_a_live_end_frame_arriving_after_the_rebuilt_one_is_not_sent_twice(
    connect, start_worker, monkeypatch, quick_reconcile
):
    held: list[tuple[str, dict]] = []
    layer = get_channel_layer()
    inner = layer.group_send

    async def late(group: str, message: dict) -> None:
        if group.startswith("chat") and is_end_frame(message):
            held.append((group, message))  # delivered much later: after the connection looked it up
            return
        await inner(group, message)

    monkeypatch.setattr(layer, "group_send", late)
    await start_worker(ScriptedProvider([script_text(ANSWER)]))
    client = await connect(await make_token())
    await send(client)
    await client.until("turn_committed", timeout=10)
    for group, message in held:
        await inner(group, message)
    await settle(client)
    assert len(terminals(client)) == 1 and len(client.of_type("turn_committed")) == 1


async def test_the_fallback_is_never_sent_after_a_final_was_delivered(connect, start_worker):
    class PublishThenFail(SinkFactory):
        """A sink whose ``finish`` publishes the final and then reports a failure each time."""

        async def __call__(self, start):
            sink = await super().__call__(start)
            publish = sink.finish

            async def finish(snapshot, payload_json: str) -> None:
                await publish(snapshot, payload_json)
                raise ConnectionError("the acknowledgement was lost")

            sink.finish = finish
            return sink

    outbox = Outbox()
    await start_worker(
        ScriptedProvider([script_text(ANSWER)]), sink_factory=PublishThenFail(), outbound=outbox.dispatcher
    )
    client = await connect(await make_token())
    await send(client)
    await client.until("turn_committed")
    async with asyncio.timeout(5):
        while not outbox.messages:  # noqa: ASYNC110 - the fallback is sent after the retries
            await asyncio.sleep(0.01)
    await settle(client)
    assert [m.text for m in outbox.messages] == [ANSWER], "the worker did send its one fallback"
    [final] = terminals(client)
    assert final["status"] == "completed" and answer_of(final) == ANSWER
    assert not [f for f in client.of_type("notification") if f.get("turn_id")], "dropped: the final was shown"


async def test_a_fallback_that_arrives_before_any_final_is_replaced_by_the_final_from_storage(
    connect, start_worker
):
    sinks, outbox = SinkFactory(*[ConnectionError("layer hiccup")] * 5), Outbox()
    await start_worker(
        ScriptedProvider([script_text(ANSWER)]), sink_factory=sinks, outbound=outbox.dispatcher
    )
    client = await connect(await make_token())
    await send(client)
    await client.until("turn_updated", lambda f: f["turn"]["status"] != "running", timeout=10)
    await settle(client)
    [final] = terminals(client)  # rebuilt from storage; the live turn_committed may come first
    assert final["status"] == "completed" and answer_of(final) == ANSWER
    assert len(client.of_type("turn_committed")) == 1
    assert len(outbox.messages) == 1
    assert not [f for f in client.of_type("notification") if f.get("turn_id")], (
        "one final: not the fallback too"
    )


async def test_deleting_a_dialog_with_a_running_turn_sends_no_rebuilt_terminal(
    connect, start_worker, quick_reconcile
):
    gate = asyncio.Event()

    async def wait_for_gate(arguments: dict) -> str:
        await gate.wait()
        return "never"

    tools = ToolRegistry(
        [Tool("wait", "waits", {"type": "object", "properties": {}}, wait_for_gate, timeout=60)]
    )
    await start_worker(ScriptedProvider([script_tool_call("call_w", "wait", {})]), tools=tools)
    token = await make_token()
    client, watcher = await connect(token), await connect(token)
    await watcher.until("ready")
    ready = await send(client)
    await client.until("turn_updated", lambda f: any(b["type"] == "tool" for b in f["turn"]["blocks"]))
    await client.send({"type": "message", "content": "/delete"})
    await client.until("session_changed", lambda f: f.get("deleted"))
    await asyncio.sleep(1.5)  # five quiet periods: the connections looked the turn up meanwhile
    for each in (client, watcher):
        await settle(each)
        assert terminals(each) == [], "a deleted dialog's turn ends without a terminal frame"
        assert not [
            f for f in each.of_type("turn_committed") if f["session_id"] == ready["active_session_id"]
        ]


async def test_a_quiet_period_of_zero_turns_the_lookups_off(connect, start_worker, monkeypatch, settings):
    settings.PICOBOT = settings.PICOBOT.replace(reconcile_quiet_seconds=0)
    reads: list[tuple] = []
    monkeypatch.setattr("conversations.storage.turn_states", lambda *args: reads.append(args) or [])
    await start_worker(ScriptedProvider([script_text(ANSWER)], delay=0.01))
    client = await connect(await make_token())
    await send(client)
    await client.until("turn_committed")
    await asyncio.sleep(0.3)
    assert reads == [], "no lookup loop (a zero quiet period would otherwise spin)"
