"""A turn reaches the model after as few storage trips as possible.

Under load every trip to the storage thread waits for the busy event loop to resume its caller,
so a woken dialog's first turn is claimed, started and its input read (dialog state, plan,
recalled memory) in **one** trip (``session_turns.claim_and_begin``), and a queued next turn is
started and read in one (``session_turns.begin_turn``). A prefetch that fails is read again by
the input builder, which reports a real failure as before; a claim that finds interrupted turns
starts nothing (their notices go out first).
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime

import pytest
from channels.db import database_sync_to_async
from django.db import DatabaseError

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.context import runtime_context
from conversations.context.turn_input import TurnInputBuilder
from conversations.models import InboxMessage
from conversations.runtime import session_turns
from conversations.storage import TurnStart
from conversations.storage import runner as storage_runner
from providers.messages import RUNTIME_CONTEXT_MARKER
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]

INPUT_READS = {"start_next_turn", "load_dialog_context", "recall_for_turn", "claim_dialog"}
TURN_START_TRIPS = INPUT_READS | {"claim_and_begin", "begin_turn", "flaky"}
"""What a turn start may run on a storage thread (the worker's inbox scan and the title service
run beside it: not counted)."""


@pytest.fixture
def trips(monkeypatch) -> list[str]:
    """The name of every function run on a storage thread, in order."""
    names: list[str] = []
    call = storage_runner._call

    def counting(fn, args, kwargs):
        names.append(fn.__name__)
        return call(fn, args, kwargs)

    monkeypatch.setattr(storage_runner, "_call", counting)
    return names


async def send_one(
    connect, start_worker, answer: str, content: str = "Hi"
) -> tuple[ScriptedProvider, object]:
    """A worker with a provider that answers ``answer``; alice sends ``content``."""
    provider = ScriptedProvider([script_text(answer)])
    await start_worker(provider)
    alice = await connect(await make_token("alice"))
    await alice.until("ready")
    await alice.send({"type": "message", "content": content, "client_msg_id": "m-1"})
    return provider, alice


def between(names: list[str], first: str, last: str | None = None) -> list[str]:
    """The turn-start trips after ``first`` (and before the next ``last``)."""
    start = names.index(first) + 1
    window = names[start : names.index(last, start)] if last else names[start:]
    return [name for name in window if name in TURN_START_TRIPS]


async def test_a_woken_dialogs_first_turn_is_claimed_started_and_read_in_one_trip(
    connect, start_worker, trips
):
    provider, alice = await send_one(connect, start_worker, "Hello!", "Hi there")
    committed = await alice.until("turn_committed")

    assert committed["messages"][-1]["content"] == "Hello!"
    before_commit = between(trips, "accept_inbound", "commit_turn")
    assert before_commit == ["claim_and_begin"], before_commit
    # The request still has its runtime context (read in that trip).
    assert RUNTIME_CONTEXT_MARKER in provider.requests[0].messages[-1].text


async def test_a_queued_next_turn_is_started_and_read_in_one_trip(connect, start_worker, trips):
    release = asyncio.Event()
    provider = ScriptedProvider([script_text("first"), script_text("second")])
    original = provider.stream

    async def held(request):  # the first answer waits until the second message is queued
        if len(provider.requests) == 0:
            await release.wait()
        async for chunk in original(request):
            yield chunk

    provider.stream = held
    await start_worker(provider)
    alice = await connect(await make_token("alice"))
    await alice.until("ready")
    await alice.send({"type": "message", "content": "one", "client_msg_id": "m-1"})
    await alice.until("ack")
    await alice.send({"type": "message", "content": "two", "client_msg_id": "m-2"})
    await alice.until("ack", lambda f: f["client_msg_id"] == "m-2")
    release.set()
    await alice.until("turn_committed", lambda f: f["messages"][0]["content"] == "two")

    after_first_commit = between(trips, "commit_turn", "commit_turn")
    assert after_first_commit == ["begin_turn"], trips
    assert not INPUT_READS & set(between(trips, "accept_inbound")), trips


async def test_a_failed_prefetch_is_read_again_by_the_builder(connect, start_worker, trips, monkeypatch):
    reads = []
    real = runtime_context.load_dialog_context

    def flaky(dialog_id: str) -> dict:
        reads.append(dialog_id)
        if len(reads) == 1:
            raise DatabaseError("disk I/O error")
        return real(dialog_id)

    monkeypatch.setattr(runtime_context, "load_dialog_context", flaky)
    _, alice = await send_one(connect, start_worker, "fine")
    committed = await alice.until("turn_committed")

    assert committed["messages"][-1]["content"] == "fine"
    assert len(reads) == 2, "the prefetch failed once, the builder read it again"
    assert between(trips, "claim_and_begin", "commit_turn") == ["flaky", "recall_for_turn"]


async def test_a_failed_read_after_a_failed_prefetch_fails_the_turn_as_before(
    connect, start_worker, monkeypatch
):
    def broken(dialog_id: str) -> dict:
        raise DatabaseError("disk I/O error")

    monkeypatch.setattr(runtime_context, "load_dialog_context", broken)
    provider, alice = await send_one(connect, start_worker, "never")
    final = await alice.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "failed"
    assert provider.requests == [], "nothing was sent to the model"


@database_sync_to_async
def _dialog_with_a_started_turn() -> str:
    owner = get_or_create_user("carol")[0]
    accepted = storage.accept_message(owner, "cli_chat", "chat-carol", "interrupted one")
    epoch = storage.claim_lease(accepted.session_id, "dead-worker", 60_000)
    storage.start_next_turn(accepted.session_id, "dead-worker", epoch)
    storage.accept_message(owner, "cli_chat", "chat-carol", "queued next")
    storage.release_lease(accepted.session_id, "dead-worker", epoch)
    return accepted.session_id


async def test_a_claim_that_finds_interrupted_turns_starts_nothing():
    dialog_id = await _dialog_with_a_started_turn()
    claim, first = await database_sync_to_async(session_turns.claim_and_begin)(
        dialog_id, "w-new", 60_000, None, {}, None
    )
    assert claim is not None and len(claim.interrupted) == 1
    assert first is None, "the interrupted turn's notice goes out before the next turn starts"
    queued = await database_sync_to_async(storage.running_inbox)("cli_chat", "chat-carol")
    assert queued == [], "the next message is still queued, not started"


async def test_a_claim_whose_start_fails_leaves_the_start_to_the_executor(monkeypatch):
    owner = await database_sync_to_async(lambda: get_or_create_user("dave")[0])()
    accepted = await database_sync_to_async(storage.accept_message)(owner, "cli_chat", "chat-dave", "hello")

    def failing(*args, **kwargs):
        raise DatabaseError("database is locked")

    monkeypatch.setattr(storage, "start_next_turn", failing)
    claim, first = await database_sync_to_async(session_turns.claim_and_begin)(
        accepted.session_id, "w1", 60_000, None, {}, None
    )
    assert claim is not None and claim.interrupted == [] and first is None


# --- the builder uses what was prefetched, without a storage read ------------------------------------


def _start(prefetched: dict | None) -> TurnStart:
    return TurnStart(
        dialog_id="cli_chat:1:x",
        channel="cli_chat",
        chat_id="1",
        title="Trip",
        inbox_id="inbox",
        turn_id="turn",
        reply_message_id="reply",
        user_message={"role": "user", "content": "What now?"},
        history=[{"seq": 1, "role": "user", "content": "What now?"}],
        history_revision=1,
        prefetched=prefetched,
    )


async def test_the_builder_takes_the_prefetched_plan_and_memory(monkeypatch):
    def no_read(*args, **kwargs):
        raise AssertionError("read again although prefetched")

    monkeypatch.setattr(runtime_context, "load_dialog_context", no_read)

    async def memory(start):
        raise AssertionError("recalled again although prefetched")

    builder = TurnInputBuilder(
        ScriptedProvider([]),
        system_prompt="You are PicoBot.",
        memory_recall=memory,
        clock=lambda: datetime(2025, 5, 4, 10, 42, tzinfo=UTC),
    )
    prefetched = {
        "dialog": {"state_version": 7, "auto_compact_failures": 0, "plan": "[>] Buy tickets"},
        "memory": "- The user is vegetarian.",
    }
    prepared = await builder.prepare(_start(prefetched))
    assert prepared.base_state_version == 7
    assert prepared.messages[-1].text.endswith(
        "Active plan:\n[>] Buy tickets\nRecalled memory:\n- The user is vegetarian.]"
    )


async def test_a_builder_without_memory_ignores_prefetched_memory():
    builder = TurnInputBuilder(
        ScriptedProvider([]), system_prompt="You are PicoBot.", clock=lambda: datetime(2025, 5, 4, tzinfo=UTC)
    )
    prefetched = {
        "dialog": {"state_version": 1, "auto_compact_failures": 0, "plan": ""},
        "memory": "- secret",
    }
    prepared = await builder.prepare(_start(prefetched))
    assert "secret" not in prepared.messages[-1].text


async def test_a_shutdown_during_the_claim_trip_leaves_the_message_queued_for_the_next_worker(
    connect, start_worker, monkeypatch
):
    claimed, gate = threading.Event(), threading.Event()
    real = storage.claim_dialog

    def held(*args, **kwargs):  # the claim is taken; the shutdown begins before the trip goes on
        claim = real(*args, **kwargs)
        claimed.set()
        gate.wait(5)
        return claim

    monkeypatch.setattr(storage, "claim_dialog", held)
    worker = await start_worker(ScriptedProvider([script_text("never")]))
    alice = await connect(await make_token("alice"))
    await alice.until("ready")
    await alice.send({"type": "message", "content": "Hi", "client_msg_id": "m-1"})
    assert await asyncio.to_thread(claimed.wait, 5)
    stopping = asyncio.ensure_future(worker.stop(timeout=5))
    await asyncio.sleep(0.05)
    gate.set()
    await stopping
    assert await database_sync_to_async(
        lambda: list(InboxMessage.objects.values_list("status", flat=True))
    )() == [InboxMessage.Status.QUEUED]

    monkeypatch.setattr(storage, "claim_dialog", real)
    provider = ScriptedProvider([script_text("answered after the restart")])
    await start_worker(provider)
    final = await alice.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "completed" and len(provider.requests) == 1
