"""After commit the executor awaits the turn's delivery; a failed final gets exactly one plain
fallback through the outbound dispatcher and one DeliveryFailure row (seed 000 §5).

The cli_chat sink rarely fails (finish = published), so these tests inject sinks that do through
the worker's ``sink_factory`` seam; running updates still reach the clients through the real sink.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from conversations.runtime.notify import RECOVERY_REVISION
from conversations.runtime.turn_sinks import open_cli_chat_sink
from delivery.models import DeliveryFailure
from delivery.outbound import OutboundDispatcher, OutboundMessage
from delivery.platforms.cli_chat import CliChatSender, CliChatSink
from delivery.sinks import SinkError, SinkNotModified
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]

ANSWER = "The final answer is forty two."


class ScriptedFinishSink(CliChatSink):
    """The real cli_chat sink whose ``finish`` first raises the scripted errors (None = publish)."""

    def __init__(self, inner: CliChatSink, errors: list[BaseException | None]) -> None:
        super().__init__(inner.channel_layer, inner.group, min_interval=inner.live_policy.min_interval)
        self.errors = list(errors)
        self.finish_statuses: list[str] = []

    async def finish(self, snapshot, payload_json: str) -> None:
        self.finish_statuses.append(snapshot.status.value)
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error
        await super().finish(snapshot, payload_json)


class SinkFactory:
    """``sink_factory`` for the worker: wraps the default sink; records every sink it opened."""

    def __init__(self, *errors: BaseException | None, open_error: BaseException | None = None) -> None:
        self.errors = list(errors)
        self.open_error = open_error
        self.sinks: list[ScriptedFinishSink] = []

    async def __call__(self, start) -> CliChatSink:
        if self.open_error is not None:
            raise self.open_error
        sink = ScriptedFinishSink(await open_cli_chat_sink(start), self.errors)
        self.sinks.append(sink)
        return sink


class Outbox:
    """The worker's outbound dispatcher with the real cli_chat sender, recording each message."""

    def __init__(self) -> None:
        self.messages: list[OutboundMessage] = []
        self.sender = CliChatSender(get_channel_layer())
        self.dispatcher = OutboundDispatcher({"cli_chat": self.send}, retry_delays=(0.0,), timeout=2.0)

    async def send(self, message: OutboundMessage) -> None:
        self.messages.append(message)
        await self.sender(message)


@database_sync_to_async
def failure_rows() -> list[DeliveryFailure]:
    return list(DeliveryFailure.objects.order_by("id"))


async def rows_eventually(count: int) -> list[DeliveryFailure]:
    """The rows are written right after the fallback; the bound only stops a broken test."""
    async with asyncio.timeout(5):
        while len(rows := await failure_rows()) < count:  # noqa: ASYNC110 - polling the database
            await asyncio.sleep(0.01)
    return rows


async def one_turn(connect, text: str = "question", msg_id: str = "m-1"):
    client = await connect(await make_token())
    ready = await client.until("ready")
    await client.send({"type": "message", "content": text, "client_msg_id": msg_id})
    return client, ready


async def answer_streaming(connect, start_worker, words: int):
    """A long turn whose answer is streaming now: ``(worker, client, ready, sinks, outbox)``."""
    sinks, outbox = SinkFactory(), Outbox()
    text = " ".join(f"w{i}" for i in range(words))
    worker = await start_worker(
        ScriptedProvider([script_text(text)], delay=0.01), sink_factory=sinks, outbound=outbox.dispatcher
    )
    client, ready = await one_turn(connect)
    await client.until("turn_updated", lambda f: any(b["type"] == "assistant" for b in f["turn"]["blocks"]))
    return worker, client, ready, sinks, outbox


async def settle(client) -> None:
    """Everything published before now has reached the client (a ping round trip after it)."""
    await client.send({"type": "ping", "nonce": "sync"})
    await client.until("pong")


async def final_turn(client) -> dict:
    """The turn's terminal snapshot, received already or still to come (it may be read from
    storage after the fallback arrived: PROTOCOL §1 "Convergence")."""
    while True:
        done = [f["turn"] for f in client.of_type("turn_updated") if f["turn"]["status"] != "running"]
        if done:
            return done[0]
        await client.recv()


async def test_a_final_that_cannot_be_delivered_gets_exactly_one_fallback_and_one_failure_row(
    connect, start_worker
):
    sinks, outbox = SinkFactory(*[ConnectionError("layer hiccup")] * 5), Outbox()
    await start_worker(
        ScriptedProvider([script_text(ANSWER)]), sink_factory=sinks, outbound=outbox.dispatcher
    )
    client, ready = await one_turn(connect)
    committed = await client.until("turn_committed")
    [row] = await rows_eventually(1)
    await settle(client)

    turn_id = committed["messages"][-1]["turn_id"]
    [fallback] = outbox.messages
    assert (fallback.text, fallback.level, fallback.session_id) == (
        ANSWER,
        "info",
        ready["active_session_id"],
    )
    assert (fallback.id, fallback.turn_id) == (f"{turn_id}:fallback", turn_id), "a key clients can dedupe on"
    assert sinks.sinks[0].finish_statuses == ["completed"] * 3, "bounded retries, then the fallback"
    # A cli_chat connection shows one final: the turn's own, rebuilt from storage, instead of the
    # plain fallback (PROTOCOL §1 "Convergence"); other platforms get the fallback message.
    final = await final_turn(client)
    await settle(client)
    assert not client.of_type("notification")
    assert len([f for f in client.of_type("turn_updated") if f["turn"]["status"] != "running"]) == 1
    assert (
        final["status"] == "completed" and final["id"] == turn_id and final["revision"] >= RECOVERY_REVISION
    )
    assert "".join(b["text"] for b in final["blocks"] if b["type"] == "assistant") == ANSWER
    assert committed["messages"][-1]["content"] == ANSWER
    assert (row.channel, row.chat_id, row.dialog_id) == (
        "cli_chat",
        ready["chat_id"],
        ready["active_session_id"],
    )
    assert (row.stage, row.attempts, row.resolved_at) == ("finish", 3, None)
    assert str(row.turn_id) == committed["messages"][-1]["turn_id"]
    assert "layer hiccup" in row.error


async def test_a_finish_that_fails_once_then_succeeds_sends_no_fallback(connect, start_worker):
    sinks, outbox = SinkFactory(ConnectionError("blip")), Outbox()
    await start_worker(
        ScriptedProvider([script_text(ANSWER)]), sink_factory=sinks, outbound=outbox.dispatcher
    )
    client, _ = await one_turn(connect)
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    await client.until("turn_committed")
    await settle(client)
    assert final["turn"]["status"] == "completed"
    assert sinks.sinks[0].finish_statuses == ["completed", "completed"]
    assert outbox.messages == [] and not client.of_type("notification")
    assert await failure_rows() == []


async def test_a_not_modified_answer_is_not_a_failure(connect, start_worker):
    sinks, outbox = SinkFactory(SinkNotModified("the card already shows this")), Outbox()
    await start_worker(
        ScriptedProvider([script_text(ANSWER)]), sink_factory=sinks, outbound=outbox.dispatcher
    )
    client, _ = await one_turn(connect)
    await client.until("turn_committed")
    await settle(client)
    assert outbox.messages == [] and await failure_rows() == []


async def test_when_the_sink_cannot_open_the_turn_is_delivered_final_only(connect, start_worker):
    sinks, outbox = SinkFactory(open_error=ConnectionError("platform unreachable")), Outbox()
    await start_worker(
        ScriptedProvider([script_text(ANSWER)]), sink_factory=sinks, outbound=outbox.dispatcher
    )
    client, _ = await one_turn(connect)
    await client.until("turn_committed")
    [row] = await rows_eventually(1)
    await settle(client)
    await final_turn(client)  # read from storage once the fallback arrived
    await settle(client)
    assert not client.of_type("notification"), "the final from storage stands in for the fallback"
    [final] = client.of_type("turn_updated")  # no live updates at all: final-only from the start
    assert final["turn"]["status"] == "completed"
    assert [m.text for m in outbox.messages] == [ANSWER]
    assert (row.stage, row.attempts) == ("open", 0) and "platform unreachable" in row.error


async def test_a_failed_commit_never_sends_the_shown_text_as_a_completed_fallback(
    connect, start_worker, monkeypatch
):
    from django.db import OperationalError

    from conversations import storage

    def broken_commit(*args, **kwargs):
        raise OperationalError("disk I/O error")

    monkeypatch.setattr(storage, "commit_turn", broken_commit)
    sinks, outbox = SinkFactory(SinkError("chat gone", permanent=True)), Outbox()
    await start_worker(
        ScriptedProvider([script_text(ANSWER)]), sink_factory=sinks, outbound=outbox.dispatcher
    )
    client, _ = await one_turn(connect)
    [row] = await rows_eventually(1)
    await settle(client)
    assert sinks.sinks[0].finish_statuses == ["failed"]
    [fallback] = outbox.messages
    assert fallback.level == "error" and "could not be saved" in fallback.text
    for frame in client.of_type("notification"):
        assert "forty two" not in frame["content"]
    assert not [f for f in client.of_type("turn_updated") if f["turn"]["status"] == "completed"]
    assert row.stage == "finish"


async def test_stop_ends_the_turn_with_one_terminal_and_no_fallback(connect, start_worker):
    _, client, ready, sinks, outbox = await answer_streaming(connect, start_worker, 400)
    await client.send({"type": "stop", "session_id": ready["active_session_id"]})
    await client.send({"type": "stop", "session_id": ready["active_session_id"]})  # a double click
    await client.until("turn_committed")
    await settle(client)
    terminals = [f for f in client.of_type("turn_updated") if f["turn"]["status"] != "running"]
    assert [f["turn"]["status"] for f in terminals] == ["cancelled"]
    assert sinks.sinks[0].finish_statuses == ["cancelled"]
    assert outbox.messages == [] and await failure_rows() == []


async def test_shutdown_mid_turn_finishes_once_and_sends_no_fallback(connect, start_worker):
    worker, client, _, sinks, outbox = await answer_streaming(connect, start_worker, 400)
    await worker.stop(timeout=5)
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "cancelled"
    assert sinks.sinks[0].finish_statuses == ["cancelled"]
    assert sinks.sinks[0].errors == [] and outbox.messages == []
    assert await failure_rows() == []


class HangingFinishFactory(SinkFactory):
    """Sinks whose ``finish`` never returns (a platform that hangs)."""

    def __init__(self) -> None:
        super().__init__()
        self.finish_called = asyncio.Event()

    async def __call__(self, start) -> CliChatSink:
        sink = await super().__call__(start)
        factory = self

        async def hang(snapshot, payload_json: str) -> None:
            factory.finish_called.set()
            await asyncio.Event().wait()

        sink.finish = hang
        return sink


async def test_shutdown_while_the_final_delivery_hangs_still_sends_exactly_one_fallback(
    connect, start_worker
):
    sinks, outbox = HangingFinishFactory(), Outbox()
    worker = await start_worker(
        ScriptedProvider([script_text(ANSWER)]), sink_factory=sinks, outbound=outbox.dispatcher
    )
    client, _ = await one_turn(connect)
    await asyncio.wait_for(sinks.finish_called.wait(), 10)  # the executor now waits for delivery
    await worker.stop(timeout=10)  # well below the normal 35 s delivery wait
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "completed"
    assert "".join(b["text"] for b in final["turn"]["blocks"] if b["type"] == "assistant") == ANSWER
    assert [m.text for m in outbox.messages] == [ANSWER]
    rows = await rows_eventually(1)
    assert [r.stage for r in rows] == ["finish"]


async def test_a_lease_storage_could_not_confirm_for_a_while_still_delivers_the_committed_final(
    connect, start_worker, monkeypatch
):
    worker, client, _, sinks, outbox = await answer_streaming(connect, start_worker, 200)
    [executor] = list(worker.executors.values())
    renew = worker.lease_keeper.renew_once
    monkeypatch.setattr(worker.lease_keeper, "renew_once", lambda: None)  # renewals stall (a slow DB)...
    executor.confirmed_until = worker.lease_keeper.confirmed_until = 0.0
    await asyncio.sleep(0.2)
    monkeypatch.setattr(worker.lease_keeper, "renew_once", renew)  # ...then go on: nobody claimed it
    await client.until("turn_committed")
    await settle(client)
    terminals = [
        f["turn"]["status"] for f in client.of_type("turn_updated") if f["turn"]["status"] != "running"
    ]
    assert terminals == ["completed"]
    assert outbox.messages == [] and await failure_rows() == []
