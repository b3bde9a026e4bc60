"""The usage writer (issue 17): queued without blocking the stream, written in batches, flushed on
demand; a write that keeps failing is logged and never reaches the caller; the queue is bounded."""

from __future__ import annotations

import logging
from io import StringIO

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command

from conversations.auth import get_or_create_user
from conversations.models import Dialog, UsageRecord
from conversations.usage import writer as writer_module
from conversations.usage.scopes import dialog_scope
from conversations.usage.writer import UsageWriter, usage_writer
from providers.messages import Message, Usage
from providers.metering import (
    CALL_SCOPE,
    CallScope,
    MeteredProvider,
    ProviderCall,
    add_observer,
    call_scope,
    remove_observer,
)
from providers.testing import ScriptedProvider, script_text
from providers.types import ProviderRequest

TEN_IN_FIVE_OUT = Usage(10, 5)
REQUEST = ProviderRequest([Message.system("Be brief."), Message.user("Hello there")])


def a_call(
    *, scope: CallScope | None = None, usage: Usage | None = TEN_IN_FIVE_OUT, **fields: object
) -> ProviderCall:
    values = {
        "preset": "default",
        "provider": "scripted",
        "model": "m",
        "scope": scope or CallScope("turn", "", "t-1", None, "cli_chat"),
        "started_at": 1_700_000_000.0,
        "latency_s": 0.25,
        "ttft_s": 0.05,
        "usage": usage,
        "outcome": "ok",
        "error": None,
        "request": REQUEST,
    }
    return ProviderCall(**{**values, **fields})


@pytest.mark.django_db(transaction=True)
async def test_a_metered_call_becomes_a_row_once_flushed_with_the_dialogs_owner_and_channel():
    writer = UsageWriter(delay=60)  # only flush() writes here
    alice, _ = await database_sync_to_async(get_or_create_user)("alice")
    dialog = await database_sync_to_async(Dialog.objects.create)(
        id="cli_chat:1:abc", channel="cli_chat", chat_id="1", dialog_id="abc", owner=alice
    )
    provider = MeteredProvider(ScriptedProvider([script_text("Short title", usage=(40, 3))]), "default")
    remove_observer(usage_writer.observe)  # this writer instead of the process's
    add_observer(writer.observe)
    try:
        with dialog_scope("title", dialog.id, keep_turn=False):
            await provider.collect(REQUEST)
    finally:
        remove_observer(writer.observe)
        add_observer(usage_writer.observe)
    assert writer.pending == 1
    await writer.flush()
    assert writer.pending == 0
    row = await database_sync_to_async(UsageRecord.objects.get)()
    assert (row.kind, row.dialog_id, row.user_id, row.username, row.channel) == (
        "title",
        dialog.id,
        alice.pk,
        "alice",
        "cli_chat",
    )
    assert (row.input_tokens, row.output_tokens, row.estimated, row.outcome) == (40, 3, False, "ok")


@pytest.mark.django_db(transaction=True)
async def test_without_flush_the_drain_task_writes_the_batch_by_itself():
    writer = UsageWriter(delay=0)
    writer.observe(a_call())
    writer.observe(a_call(usage=None, output_text="Hi there, how are you?"))
    await writer._task
    rows = await database_sync_to_async(lambda: list(UsageRecord.objects.order_by("id")))()
    assert [(r.input_tokens > 0, r.output_tokens > 0, r.estimated) for r in rows] == [
        (True, True, False),
        (True, True, True),
    ]


@pytest.mark.django_db(transaction=True)
async def test_a_row_the_database_refuses_is_logged_and_the_others_of_its_batch_are_written(caplog):
    writer = UsageWriter(delay=60)
    writer.observe(a_call())
    writer.observe(a_call(usage=Usage(-5, -1)))  # the column's check refuses a negative count
    writer.observe(a_call(usage=Usage(7, 2)))
    with caplog.at_level(logging.ERROR):
        await writer.flush()
    inputs = await database_sync_to_async(
        lambda: list(UsageRecord.objects.values_list("input_tokens", flat=True))
    )()
    assert sorted(inputs) == [7, 10]
    assert any("usage row lost" in r.getMessage() and "in=-5" in r.getMessage() for r in caplog.records)


async def test_a_batch_whose_write_keeps_failing_is_logged_and_flush_does_not_raise(monkeypatch, caplog):
    def broken(calls: list) -> int:
        raise RuntimeError("database gone")

    monkeypatch.setattr(writer_module, "record_calls", broken)
    writer = UsageWriter(delay=60)
    writer.observe(a_call(scope=CallScope("turn", "cli_chat:1:x", "t-9", 1, "cli_chat")))
    with caplog.at_level(logging.ERROR):
        await writer.flush()
    assert writer.pending == 0
    assert any(
        "usage rows lost" in r.getMessage() and "cli_chat:1:x" in r.getMessage() for r in caplog.records
    )


def test_the_queue_is_bounded_and_drops_the_oldest_with_a_log_line(caplog):
    writer = UsageWriter(max_pending=3)
    with caplog.at_level(logging.ERROR):
        for n in range(5):  # no event loop here: queued only
            writer.observe(a_call(latency_s=float(n)))
    assert writer.pending == 3 and writer.dropped == 2
    assert [c.latency_s for c in writer._calls] == [2.0, 3.0, 4.0]
    assert sum("usage rows dropped" in r.getMessage() for r in caplog.records) == 1


# --- scopes -----------------------------------------------------------------------------------------


def test_side_work_inside_a_turn_of_the_same_dialog_keeps_the_turns_user_and_channel():
    turn = CallScope("turn", "cli_chat:1:a", "turn-1", 7, "cli_chat")
    with call_scope(turn):
        with dialog_scope("compaction", "cli_chat:1:a", keep_turn=True) as scope:
            assert scope == CallScope("compaction", "cli_chat:1:a", "turn-1", 7, "cli_chat")
        with dialog_scope("title", "cli_chat:1:a", keep_turn=False) as scope:
            assert scope == CallScope("title", "cli_chat:1:a", "", 7, "cli_chat")
        with dialog_scope("title", "cli_chat:1:other", keep_turn=False) as scope:
            assert scope == CallScope("title", "cli_chat:1:other")
        assert CALL_SCOPE.get() == turn
    assert CALL_SCOPE.get() is None


# --- purge ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_purge_keeps_the_usage_rows_of_the_dialogs_it_deletes():
    alice, _ = get_or_create_user("alice")
    Dialog.objects.create(
        id="cli_chat:1:gone", channel="cli_chat", chat_id="1", dialog_id="gone", owner=alice, deleted_at=1
    )
    UsageRecord.objects.create(
        user=alice, username="alice", dialog_id="cli_chat:1:gone", day="2026-01-02", input_tokens=9
    )
    call_command("purge", "--retention-days", "0", "--apply", stdout=StringIO(), stderr=StringIO())
    assert not Dialog.objects.filter(pk="cli_chat:1:gone").exists()
    assert list(UsageRecord.objects.values_list("dialog_id", "input_tokens")) == [("cli_chat:1:gone", 9)]
    alice.delete()  # a deleted user's rows stay too, under their name
    assert list(UsageRecord.objects.values_list("user_id", "username")) == [(None, "alice")]
