"""Runtime sessions (seed 004 §5, §6.4 TTL cleanup, §8 serve from memory when a read fails).

Three layers: the pure cache (fake clock, no database), the storage delta of
``start_next_turn(known_revision=…)`` and ``commit_turn``'s history rows, and the agent worker end
to end over the WebSocket consumer with a ``ScriptedProvider`` that records every request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace

import pytest
from channels.db import database_sync_to_async
from django.conf import settings as django_settings

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.context.history import build_turn_input
from conversations.models import Dialog, Message
from conversations.runtime import sessions as sessions_module
from conversations.runtime.sessions import Session, SessionManager
from conversations.storage.shapes import PROTOCOL_FIELDS, history_row_to_protocol
from providers.chunks import Done, ProviderStateChunk
from providers.messages import RUNTIME_CONTEXT_MARKER
from providers.testing import ScriptedProvider, script_text, script_tool_call
from tests.conversations.conftest import make_token

CHANNEL = "cli_chat"
LEASE_MS = 15_000
SECRET_STATE = {"provider": "scripted", "signature": "sig-never-leaves"}


class FakeClock:
    """A settable monotonic clock (seconds)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def row(seq: int, role: str = "user", content: str | None = None, **extra: object) -> dict:
    """A history-form row (``storage.message_to_history_row`` shape)."""
    data = {
        "id": f"m{seq}",
        "seq": seq,
        "role": role,
        "content": content if content is not None else f"{role} {seq}",
        "reasoning": None,
        "tool_calls": [],
        "tool_call_id": None,
        "tool_name": None,
        "is_error": False,
        "turn_id": None,
        "iteration": 0,
        "completion_status": "completed",
        "created_at": 1_750_000_000_000 + seq,
        "provider_state": None,
        "media_refs": [],
    }
    data.update(extra)
    return data


def loaded(
    dialog_id: str = "cli_chat:c:d", *, summary_seq: int = 0, upto: int = 4, now: float = 0.0
) -> Session:
    rows = [row(s) for s in range(summary_seq + 1, upto + 1)]
    return Session.loaded(
        dialog_id, title="T", summary="", summary_seq=summary_seq, rows=rows, history_revision=upto, now=now
    )


# --- the pure cache ------------------------------------------------------------------------------


def test_a_session_unused_for_longer_than_the_ttl_is_evicted_and_a_used_one_stays():
    clock = FakeClock()
    manager = SessionManager(ttl_seconds=60, clock=clock)
    manager.put(loaded("a"))
    clock.advance(30)
    manager.put(loaded("b"))
    clock.advance(30)
    assert manager.evict_idle() == []  # "a" is exactly at the TTL: not longer than it
    clock.advance(1)
    assert manager.evict_idle() == ["a"]
    assert "a" not in manager and "b" in manager and len(manager) == 1
    clock.advance(30)
    assert manager.evict_idle() == ["b"]
    assert len(manager) == 0 and manager.get("b") is None


def test_a_ttl_of_zero_never_evicts():
    clock = FakeClock()
    manager = SessionManager(ttl_seconds=0, clock=clock)
    manager.put(loaded("a"))
    clock.advance(10 * 365 * 86400)
    assert manager.evict_idle() == [] and manager.cleanup_once() == []
    assert "a" in manager


def test_touch_refreshes_the_idle_time():
    clock = FakeClock()
    manager = SessionManager(ttl_seconds=60, clock=clock)
    manager.put(loaded("a"))
    clock.advance(50)
    assert manager.touch("a") is True
    clock.advance(50)
    assert manager.evict_idle() == []
    clock.advance(11)
    assert manager.evict_idle() == ["a"]
    assert manager.touch("a") is False


def test_explicit_eviction_and_put_replacing_a_session():
    manager = SessionManager(ttl_seconds=60, clock=FakeClock())
    first, second = loaded("a"), loaded("a", upto=6)
    manager.put(first)
    manager.put(second)
    assert manager.get("a") is second and len(manager) == 1
    assert manager.evict("a") is True and manager.evict("a") is False


def test_rows_that_continue_the_history_are_appended():
    session = loaded(upto=2)
    assert session.apply_commit([row(3, "assistant"), row(4, "tool")], now=5.0)
    assert [r["seq"] for r in session.history] == [1, 2, 3, 4]
    assert (session.history_revision, session.last_used, session.valid) == (4, 5.0, True)


@pytest.mark.parametrize("seqs", [[4], [3, 5], [2], [3, 3]])
def test_a_row_that_does_not_follow_the_revision_invalidates_the_session_and_keeps_no_hole(seqs):
    session = loaded(upto=2)
    assert session.apply_commit([row(s) for s in seqs], now=1.0) is False
    assert session.valid is False
    assert [r["seq"] for r in session.history] == [1, 2] and session.history_revision == 2
    assert session.append([row(3)]) is False, "an invalid session refuses everything"
    with pytest.raises(ValueError):
        SessionManager(60).put(session)


def test_a_turn_start_delta_with_another_summary_seq_or_a_short_revision_invalidates():
    session = loaded(upto=2)
    assert not session.apply_turn_start(
        [row(3)], title="T", summary="S", summary_seq=1, history_revision=3, now=1.0
    ), "a compaction happened elsewhere"
    assert session.valid is False
    short = loaded(upto=2)
    assert not short.apply_turn_start(
        [row(3)], title="T", summary="", summary_seq=0, history_revision=4, now=1.0
    )
    assert short.valid is False


def test_a_turn_start_delta_updates_title_summary_text_and_last_used():
    session = loaded(upto=2)
    assert session.apply_turn_start(
        [row(3)], title="New", summary="", summary_seq=0, history_revision=3, now=9.0
    )
    assert (session.title, session.history_revision, session.last_used) == ("New", 3, 9.0)


def test_a_full_load_with_a_seq_hole_gives_an_invalid_session_that_still_carries_the_rows():
    rows = [row(1), row(3)]
    session = Session.loaded("d", title="", summary="", summary_seq=0, rows=rows, history_revision=3, now=0.0)
    assert session.valid is False and session.history == rows
    after_summary = Session.loaded(
        "d", title="", summary="S", summary_seq=4, rows=[row(5), row(6)], history_revision=6, now=0.0
    )
    assert after_summary.valid and after_summary.history_revision == 6


def test_the_cleanup_loop_logs_evictions_and_survives_a_failing_pass(monkeypatch, caplog):
    clock = FakeClock()
    manager = SessionManager(ttl_seconds=60, clock=clock)
    manager.put(loaded("a"))
    clock.advance(61)
    sleeps: list[float] = []
    passes = {"n": 0}
    real_clock = manager.clock

    def flaky_clock() -> float:
        passes["n"] += 1
        if passes["n"] == 1:
            raise RuntimeError("the first pass fails")
        return real_clock()

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:  # two passes ran: end the loop the way stop() does
            raise asyncio.CancelledError

    manager.clock = flaky_clock
    monkeypatch.setattr(sessions_module, "asyncio", SimpleNamespace(sleep=fake_sleep))
    caplog.set_level(logging.INFO, logger="conversations.runtime.sessions")
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(manager.run_cleanup(3600))
    assert sleeps == [3600, 3600, 3600]
    assert "a" not in manager
    levels = [
        (r.levelno, r.getMessage()) for r in caplog.records if r.name == "conversations.runtime.sessions"
    ]
    assert levels[0][0] == logging.ERROR and "cleanup failed" in levels[0][1]
    assert (
        levels[1][0] == logging.INFO
        and "evicted 1 idle runtime session" in levels[1][1]
        and "a" in levels[1][1]
    )


def test_the_cleanup_loop_refuses_a_non_positive_interval():
    with pytest.raises(ValueError):
        asyncio.run(SessionManager(60).run_cleanup(0))


def test_history_rows_lose_provider_state_media_and_raw_arguments_in_protocol_form():
    call = {"id": "c1", "name": "current_time", "arguments": {}, "raw_arguments": "{not json"}
    data = row(
        2,
        "assistant",
        provider_state=SECRET_STATE,
        tool_calls=[call],
        media_refs=[{"mime_type": "x", "data": "y"}],
    )
    out = history_row_to_protocol(data)
    assert "provider_state" not in out and "media_refs" not in out
    assert out["tool_calls"] == [{"id": "c1", "name": "current_time", "arguments": {}}]
    assert data["tool_calls"][0]["raw_arguments"] == "{not json", "the held row is not mutated"
    assert set(out) == set(PROTOCOL_FIELDS)


def memory_seqs(page: dict | None) -> list[int] | None:
    return None if page is None else [m["seq"] for m in page["messages"]]


def test_history_pages_are_served_from_memory_only_when_they_lie_within_it():
    manager = SessionManager(60, clock=FakeClock())
    manager.put(loaded("d", summary_seq=4, upto=10))  # memory holds seqs 5..10
    page = manager.history_page_from_memory("d", None, 3)
    assert memory_seqs(page) == [8, 9, 10] and page["has_more"] is True
    assert page["session_id"] == "d" and page["history_revision"] == 10
    assert memory_seqs(manager.history_page_from_memory("d", None, 6)) == [5, 6, 7, 8, 9, 10]
    assert manager.history_page_from_memory("d", None, 7) is None, "seq 4 is only in the DB"
    assert memory_seqs(manager.history_page_from_memory("d", 8, 3)) == [5, 6, 7]
    assert manager.history_page_from_memory("d", 5, 1) is None
    assert memory_seqs(manager.history_page_from_memory("d", 99, 2)) == [9, 10]
    assert manager.history_page_from_memory("other", None, 3) is None
    assert manager.history_page_from_memory("d", None, 0) is None


def test_a_history_page_reaching_the_first_row_has_no_more():
    manager = SessionManager(60, clock=FakeClock())
    manager.put(loaded("d", upto=3))
    page = manager.history_page_from_memory("d", None, 50)
    assert memory_seqs(page) == [1, 2, 3] and page["has_more"] is False
    page = manager.history_page_from_memory("d", 3, 1)
    assert memory_seqs(page) == [2] and page["has_more"] is True
    empty = manager.history_page_from_memory("d", 1, 10)
    assert memory_seqs(empty) == [] and empty["has_more"] is False


def test_the_process_wide_manager_uses_the_configured_ttl(settings):
    settings.PICOBOT = settings.PICOBOT.replace(session_ttl_hours=2.5)
    sessions_module.reset_session_manager()
    try:
        manager = sessions_module.session_manager()
        assert manager.ttl_seconds == 9000 and sessions_module.session_manager() is manager
    finally:
        sessions_module.reset_session_manager()


# --- storage: the delta of a turn start, the rows of a commit ------------------------------------


@pytest.fixture
def alice(db):
    return get_or_create_user("alice")[0]


@pytest.fixture
def dialog(alice) -> Dialog:
    return storage.active_dialog(alice, CHANNEL, "chat-alice")


def run_turn(alice, dialog: Dialog, text: str, answer: str, epoch: int, **known: int) -> storage.TurnStart:
    """Accept ``text``, start its turn (with ``known``), commit ``answer``; the TurnStart."""
    storage.accept_message(alice, CHANNEL, "chat-alice", text, session_id=dialog.id)
    start = storage.start_next_turn(dialog.id, "w1", epoch, **known)
    assert start is not None
    storage.commit_turn(dialog.id, "w1", epoch, start.inbox_id, [{"role": "assistant", "content": answer}])
    return start


def db_history(dialog: Dialog, after: int = 0) -> list[dict]:
    return [storage.message_to_history_row(m) for m in Message.objects.filter(dialog=dialog, seq__gt=after)]


@pytest.mark.django_db
def test_a_turn_start_with_the_current_revision_reads_only_the_new_user_row(alice, dialog):
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    first = run_turn(alice, dialog, "u1", "a1", epoch)
    assert (first.history_is_delta, first.history_revision, first.summary_seq) == (False, 1, 0)
    second = run_turn(alice, dialog, "u2", "a2", epoch, known_revision=2, known_summary_seq=0)
    assert second.history_is_delta is True
    assert [(r["seq"], r["content"]) for r in second.history] == [(3, "u2")]
    assert second.history == db_history(dialog, after=2)[:1]  # the same row as a DB read
    assert second.history_revision == 3


@pytest.mark.django_db
def test_a_turn_start_behind_the_dialog_gets_every_row_it_lacks(alice, dialog):
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    run_turn(alice, dialog, "u1", "a1", epoch)
    start = run_turn(alice, dialog, "u2", "a2", epoch, known_revision=1, known_summary_seq=0)
    assert start.history_is_delta and [r["seq"] for r in start.history] == [2, 3]


@pytest.mark.django_db
def test_a_changed_summary_or_an_unknown_revision_gives_the_full_history(alice, dialog):
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    run_turn(alice, dialog, "u1", "a1", epoch)
    run_turn(alice, dialog, "u2", "a2", epoch)
    Dialog.objects.filter(pk=dialog.pk).update(summary="u1 asked, a1 answered", summary_seq=2)  # a compaction
    start = run_turn(alice, dialog, "u3", "a3", epoch, known_revision=4, known_summary_seq=0)
    assert (
        start.history_is_delta is False
        and start.summary_seq == 2
        and start.summary == "u1 asked, a1 answered"
    )
    assert [r["seq"] for r in start.history] == [3, 4, 5] and start.history_revision == 5
    ahead = run_turn(alice, dialog, "u4", "a4", epoch, known_revision=99, known_summary_seq=2)
    assert ahead.history_is_delta is False and [r["seq"] for r in ahead.history] == [3, 4, 5, 6, 7]
    below_summary = run_turn(alice, dialog, "u5", "a5", epoch, known_revision=1, known_summary_seq=2)
    assert below_summary.history_is_delta is False


@pytest.mark.django_db
def test_commit_returns_its_new_rows_exactly_as_a_db_read_gives_them(alice, dialog):
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    storage.accept_message(alice, CHANNEL, "chat-alice", "go", session_id=dialog.id)
    start = storage.start_next_turn(dialog.id, "w1", epoch)
    rows = [
        {
            "role": "assistant",
            "content": "calling",
            "provider_state": {"provider": "x", "layout": ("a", "b"), 7: "int key"},
            "tool_calls": [{"id": "c1", "name": "t", "arguments": {}, "raw_arguments": "{bad"}],
            "turn_id": start.turn_id,
            "iteration": 1,
        },
        {"role": "tool", "content": "err\x00", "tool_call_id": "c1", "tool_name": "t", "is_error": True},
        {
            "id": start.reply_message_id.upper(),
            "role": "assistant",
            "content": "done",
            "turn_id": start.turn_id,
        },
    ]
    result = storage.commit_turn(dialog.id, "w1", epoch, start.inbox_id, rows)
    assert result.history_rows == db_history(dialog, after=1)
    assert [r["seq"] for r in result.history_rows] == [2, 3, 4]
    assert [m["seq"] for m in result.messages] == [1, 2, 3, 4], "turn_committed still has the user row"


@pytest.mark.django_db
def test_load_history_reads_the_rows_after_the_summary_for_the_lease_holder(alice, dialog):
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    run_turn(alice, dialog, "u1", "a1", epoch)
    Dialog.objects.filter(pk=dialog.pk).update(summary="S", summary_seq=1)
    snapshot = storage.turns.load_history(dialog.id, "w1", epoch)
    assert (snapshot.summary, snapshot.summary_seq, snapshot.history_revision) == ("S", 1, 2)
    assert snapshot.history == db_history(dialog, after=1)
    with pytest.raises(storage.LeaseLostError):
        storage.turns.load_history(dialog.id, "w2", epoch)


@pytest.mark.django_db
def test_message_to_protocol_is_the_history_form_through_the_session_projection(alice, dialog):
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    storage.accept_message(alice, CHANNEL, "chat-alice", "go", session_id=dialog.id)
    start = storage.start_next_turn(dialog.id, "w1", epoch)
    call = {"id": "c1", "name": "t", "arguments": {}, "raw_arguments": "{bad"}
    storage.commit_turn(
        dialog.id,
        "w1",
        epoch,
        start.inbox_id,
        [{"role": "assistant", "content": "x", "provider_state": SECRET_STATE, "tool_calls": [call]}],
    )
    for message in Message.objects.filter(dialog=dialog):
        out = storage.message_to_protocol(message)
        assert out == history_row_to_protocol(storage.message_to_history_row(message))
        assert "provider_state" not in out and all("raw_arguments" not in c for c in out["tool_calls"])


# --- end to end: the agent worker keeps, extends, evicts and reloads sessions --------------------

e2e = pytest.mark.django_db(transaction=True)


def with_state(chunks: list) -> list:
    """``chunks`` with a provider replay state before their ``Done`` (server-only data)."""
    assert isinstance(chunks[-1], Done)
    return [*chunks[:-1], ProviderStateChunk(dict(SECRET_STATE)), chunks[-1]]


def without_runtime_context(messages: list) -> list[dict]:
    """Request messages as dicts, the per-request runtime context cut off (it holds the time)."""
    out = []
    for message in messages:
        data = message.to_dict()
        for block in data["content"]:
            if block.get("type") == "text" and RUNTIME_CONTEXT_MARKER in block["text"]:
                block["text"] = block["text"].split(RUNTIME_CONTEXT_MARKER)[0]
        out.append(data)
    return out


@database_sync_to_async
def fresh_full_load_input(dialog_id: str, upto_seq: int) -> list[dict]:
    """The provider input a turn whose user row is ``upto_seq`` gets from a fresh DB load."""
    dialog = Dialog.objects.get(pk=dialog_id)
    rows = [
        storage.message_to_history_row(m)
        for m in Message.objects.filter(dialog=dialog, seq__gt=dialog.summary_seq, seq__lte=upto_seq)
    ]
    messages = build_turn_input(
        django_settings.PICOBOT.system_prompt, rows, runtime_context="ctx", summary=dialog.summary
    )
    return without_runtime_context(messages)


@database_sync_to_async
def db_rows(dialog_id: str) -> list[dict]:
    dialog = Dialog.objects.get(pk=dialog_id)
    return [
        storage.message_to_history_row(m)
        for m in Message.objects.filter(dialog=dialog, seq__gt=dialog.summary_seq)
    ]


@pytest.fixture
def starts(monkeypatch) -> list[tuple[dict, bool, list[int]]]:
    """Every turn start of the test: (known_* keywords, history_is_delta, history seqs)."""
    seen: list[tuple[dict, bool, list[int]]] = []
    real = storage.start_next_turn

    def spy(*args: object, **known: int) -> storage.TurnStart | None:
        start = real(*args, **known)
        if start is not None:
            seen.append((known, start.history_is_delta, [r["seq"] for r in start.history]))
        return start

    monkeypatch.setattr(storage, "start_next_turn", spy)
    return seen


async def say(client, text: str, msg_id: str) -> dict:
    """Send ``text`` and wait for its turn's ``turn_committed``."""
    await client.send({"type": "message", "content": text, "client_msg_id": msg_id})
    ack = await client.until("ack", lambda f: f["client_msg_id"] == msg_id)
    return await client.until("turn_committed", lambda f: f["messages"][0]["id"] == ack["message_id"])


def turn_one_script() -> list:
    """A tool call with invalid argument text (kept as raw_arguments), its answer; both with state."""
    return [
        with_state(script_tool_call("call_1", "current_time", "{not json")),
        with_state(script_text("It is noon.", reasoning="the tool failed")),
    ]


@e2e
async def test_a_second_turn_reads_only_its_new_row_and_sends_what_a_full_load_would(
    connect, start_worker, starts
):
    clock = FakeClock()
    sessions = SessionManager(3600, clock=clock)
    provider = ScriptedProvider([*turn_one_script(), script_text("Still noon.")])
    await start_worker(provider, sessions=sessions)
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]

    first = await say(client, "What time is it?", "s-1")
    assert [m["seq"] for m in first["messages"]] == [1, 2, 3, 4]
    held = sessions.get(session_id)
    assert held is not None and held.history_revision == 4 and held.history == await db_rows(session_id)

    second = await say(client, "And now?", "s-2")
    assert [m["seq"] for m in second["messages"]] == [5, 6]
    assert starts == [({}, False, [1]), ({"known_revision": 4, "known_summary_seq": 0}, True, [5])]
    request = without_runtime_context(provider.requests[2].messages)
    assert request == await fresh_full_load_input(session_id, 5)
    assert [m["role"] for m in request] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert RUNTIME_CONTEXT_MARKER in provider.requests[2].messages[-1].text
    assert provider.requests[2].messages[2].provider_state == SECRET_STATE, "replay state kept in memory"
    assert held is sessions.get(session_id) and held.history == await db_rows(session_id)


@e2e
async def test_after_the_ttl_the_runtime_session_is_gone_from_memory_and_the_dialog_reloads_intact(
    connect, start_worker, starts
):
    """Evicted after the TTL (memory only), the next turn reloads the full history."""
    clock = FakeClock()
    sessions = SessionManager(ttl_seconds=24 * 3600, clock=clock)
    provider = ScriptedProvider([*turn_one_script(), script_text("Still noon."), script_text("Yes.")])
    await start_worker(provider, sessions=sessions)
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await say(client, "What time is it?", "t-1")
    assert session_id in sessions

    clock.advance(24 * 3600 + 1)
    assert sessions.cleanup_once() == [session_id]  # one pass of the worker's cleanup loop
    assert session_id not in sessions and len(sessions) == 0
    assert len(await db_rows(session_id)) == 4, "the DB keeps everything"

    second = await say(client, "And now?", "t-2")
    assert [m["seq"] for m in second["messages"]] == [5, 6]
    assert starts[1] == ({}, False, [1, 2, 3, 4, 5]), "no session: a full load"
    request = provider.requests[2].messages
    assert without_runtime_context(request) == await fresh_full_load_input(session_id, 5)
    assert [(m.role, m.text) for m in request[1:5]] == [
        ("user", "What time is it?"),
        ("assistant", ""),
        ("tool", ""),
        ("assistant", "It is noon."),
    ]
    assert request[2].tool_calls[0].raw_arguments == "{not json" and request[2].provider_state == SECRET_STATE
    assert request[3].content[0].tool_call_id == "call_1"
    assert request[-1].text.startswith("And now?" + RUNTIME_CONTEXT_MARKER)
    back = sessions.get(session_id)
    assert back is not None and back.history_revision == 6 and back.history == await db_rows(session_id)

    # Without an eviction in between, the next turn is a delta and its input is the same as a load.
    clock.advance(60)
    assert sessions.evict_idle() == []
    await say(client, "Sure?", "t-3")
    assert starts[2] == ({"known_revision": 6, "known_summary_seq": 0}, True, [7])
    assert without_runtime_context(provider.requests[3].messages) == await fresh_full_load_input(
        session_id, 7
    )


@e2e
async def test_a_compaction_done_elsewhere_makes_the_next_turn_reload(connect, start_worker, starts):
    sessions = SessionManager(3600, clock=FakeClock())
    provider = ScriptedProvider([script_text("Hello."), script_text("Fine.")])
    await start_worker(provider, sessions=sessions)
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await say(client, "Hi", "c-1")

    await database_sync_to_async(
        lambda: Dialog.objects.filter(pk=session_id).update(summary="The user greeted us.", summary_seq=2)
    )()
    await say(client, "How are you?", "c-2")
    assert starts[1] == ({"known_revision": 2, "known_summary_seq": 0}, False, [3])
    request = provider.requests[1].messages
    assert without_runtime_context(request) == await fresh_full_load_input(session_id, 3)
    assert "The user greeted us." in request[0].text and [m.role for m in request] == ["system", "user"]
    held = sessions.get(session_id)
    assert (held.summary_seq, held.summary, [r["seq"] for r in held.history]) == (
        2,
        "The user greeted us.",
        [3, 4],
    )


@e2e
async def test_a_delta_that_does_not_fit_the_session_falls_back_to_a_full_reload(
    connect, start_worker, monkeypatch
):
    sessions = SessionManager(3600, clock=FakeClock())
    provider = ScriptedProvider([script_text("One."), script_text("Two.")])
    await start_worker(provider, sessions=sessions)
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await say(client, "first", "d-1")
    real = storage.start_next_turn

    def holed(*args: object, **known: int) -> storage.TurnStart | None:
        start = real(*args, **known)
        if start is not None and start.history_is_delta:
            start.history = []  # as if a row went missing on the way: a hole the session must not keep
        return start

    monkeypatch.setattr(storage, "start_next_turn", holed)
    await say(client, "second", "d-2")
    assert without_runtime_context(provider.requests[1].messages) == await fresh_full_load_input(
        session_id, 3
    )
    held = sessions.get(session_id)
    assert held is not None and held.valid and held.history == await db_rows(session_id)


@e2e
async def test_a_failed_commit_evicts_the_session_and_the_next_turn_reloads(
    connect, start_worker, starts, monkeypatch
):
    from django.db import OperationalError

    sessions = SessionManager(3600, clock=FakeClock())
    provider = ScriptedProvider([script_text("One."), script_text("Lost."), script_text("Three.")])
    await start_worker(provider, sessions=sessions)
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await say(client, "first", "f-1")
    assert session_id in sessions

    real_commit = storage.commit_turn

    def broken_commit(*args: object, **kwargs: object) -> None:
        raise OperationalError("disk I/O error")

    monkeypatch.setattr(storage, "commit_turn", broken_commit)
    await client.send({"type": "message", "content": "second", "client_msg_id": "f-2"})
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "failed"
    assert session_id not in sessions, "a failed commit leaves the DB state unknown: reload"

    monkeypatch.setattr(storage, "commit_turn", real_commit)
    await say(client, "third", "f-3")
    assert starts[2] == ({}, False, [1, 2, 3, 4])  # the failed turn's user row stays in history
    assert without_runtime_context(provider.requests[2].messages) == await fresh_full_load_input(
        session_id, 4
    )
    assert sessions.get(session_id).history == await db_rows(session_id)


@e2e
async def test_a_commit_refused_for_a_lost_lease_evicts_the_session(connect, start_worker, monkeypatch):
    evicted = asyncio.Event()

    class Watched(SessionManager):
        def evict(self, dialog_id: str) -> bool:
            held = super().evict(dialog_id)
            evicted.set()
            return held

    sessions = Watched(3600, clock=FakeClock())
    await start_worker(ScriptedProvider([script_text("One."), script_text("Two.")]), sessions=sessions)
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await say(client, "first", "l-1")
    assert session_id in sessions and not evicted.is_set()

    def stale_commit(*args: object, **kwargs: object) -> None:
        raise storage.LeaseLostError("stale epoch")

    monkeypatch.setattr(storage, "commit_turn", stale_commit)
    await client.send({"type": "message", "content": "second", "client_msg_id": "l-2"})
    await asyncio.wait_for(evicted.wait(), timeout=10)  # a stale owner publishes nothing: watch the cache
    assert session_id not in sessions


@e2e
async def test_a_live_dialogs_history_page_from_memory_equals_the_db_page_and_leaks_nothing(
    connect, start_worker
):
    sessions = SessionManager(3600, clock=FakeClock())
    await start_worker(ScriptedProvider(turn_one_script()), sessions=sessions)
    token = await make_token()
    client = await connect(token)
    session_id = (await client.until("ready"))["active_session_id"]
    await say(client, "What time is it?", "h-1")

    owner = await database_sync_to_async(lambda: Dialog.objects.get(pk=session_id).owner)()
    for before_seq, limit in [(None, 50), (None, 2), (4, 2), (3, 10)]:
        memory = sessions.history_page_from_memory(session_id, before_seq, limit)
        db = await database_sync_to_async(storage.history_page)(owner, session_id, before_seq, limit)
        assert memory == db, (before_seq, limit)
    page = sessions.history_page_from_memory(session_id, None, 50)
    text = json.dumps(page)
    assert "sig-never-leaves" not in text and "provider_state" not in text
    assert "raw_arguments" not in text and "media_refs" not in text
    assert page["messages"][1]["tool_calls"] == [{"id": "call_1", "name": "current_time", "arguments": {}}]
    held = sessions.get(session_id)
    assert held.history[1]["tool_calls"][0]["raw_arguments"] == "{not json", "memory keeps it for the model"

    held.summary_seq = 2  # as after a compaction: rows 1–2 are no longer in memory
    del held.history[:2]
    assert sessions.history_page_from_memory(session_id, None, 50) is None
    assert [m["seq"] for m in sessions.history_page_from_memory(session_id, None, 2)["messages"]] == [3, 4]


@e2e
async def test_the_worker_runs_the_cleanup_loop_at_the_configured_interval_until_stopped(
    start_worker, settings
):
    settings.PICOBOT = settings.PICOBOT.replace(session_cleanup_minutes=0.5)
    intervals: list[float] = []

    class Recording(SessionManager):
        async def run_cleanup(self, interval_seconds: float) -> None:
            intervals.append(interval_seconds)
            await super().run_cleanup(interval_seconds)

    worker = await start_worker(ScriptedProvider([]), sessions=Recording(60))
    assert intervals == [30.0]
    loops = list(worker._loops)
    await worker.stop(timeout=5)
    assert all(task.done() for task in loops)


@e2e
async def test_a_worker_without_injected_sessions_uses_the_process_manager(start_worker):
    sessions_module.reset_session_manager()
    try:
        worker = await start_worker(ScriptedProvider([]))
        assert worker.sessions is sessions_module.session_manager()
    finally:
        sessions_module.reset_session_manager()
