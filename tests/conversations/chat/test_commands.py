"""Slash commands over cli_chat (seed 004 §7, PROTOCOL "Slash commands").

Every command's success and error path runs on two chats of two users: alice's commands never
reach bob's connection, and bob's dialog ids answer ``not_found`` to alice.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from conversations.agent.tool_registry import Tool
from conversations.chat.commands import format_info
from conversations.models import Dialog, InboxMessage, Message
from conversations.tools import ToolRegistry
from providers.testing import ScriptedProvider, script_text, script_tool_call
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]


async def two_chats(connect):
    """alice and bob, each connected (``ready`` received); returns (alice, bob, alice_ready, bob_ready)."""
    alice, bob = await connect(await make_token("alice")), await connect(await make_token("bob"))
    ready_a, ready_b = await alice.until("ready"), await bob.until("ready")
    return alice, bob, ready_a, ready_b


async def command(client, content: str, kind: str, **frame):
    await client.send({"type": "message", "content": content, **frame})
    return await client.until(kind)


async def assert_no_cross_talk(bob) -> None:
    assert await bob.communicator.receive_nothing(timeout=0.2), "alice's commands reached bob's chat"


@database_sync_to_async
def dialog_row(session_id: str) -> Dialog:
    return Dialog.objects.get(pk=session_id)


async def test_new_creates_an_active_dialog_and_welcomes(connect):
    alice, bob, ready, _ = await two_chats(connect)
    changed = await command(alice, "/new Trip plans", "session_changed")
    assert changed["active"] is True and changed["title"] == "Trip plans"
    assert changed["session_id"] != ready["active_session_id"]
    welcome = await alice.until("notification")
    assert welcome["session_id"] == changed["session_id"] and "/sessions" in welcome["content"]
    items = (await command(alice, "/sessions", "sessions"))["items"]
    assert [(i["session_id"], i["active"]) for i in items][0] == (changed["session_id"], True)
    assert {i["session_id"] for i in items} == {changed["session_id"], ready["active_session_id"]}
    assert not alice.of_type("ack"), "commands are not messages"
    error = await command(alice, "/new " + "x" * 201, "error")
    assert error["code"] == "invalid_command" and "200" in error["message"]
    await assert_no_cross_talk(bob)


async def test_sessions_lists_only_this_chats_dialogs(connect):
    alice, bob, ready_a, ready_b = await two_chats(connect)
    items = (await command(alice, "/sessions", "sessions"))["items"]
    assert [i["session_id"] for i in items] == [ready_a["active_session_id"]]
    assert (await command(alice, "/sessions now", "error"))["code"] == "invalid_command"
    await assert_no_cross_talk(bob)


async def test_switch_makes_a_dialog_active_and_sends_its_history(connect, start_worker):
    await start_worker(ScriptedProvider([script_text("First dialog answer.")]))
    alice, bob, ready, ready_b = await two_chats(connect)
    first = ready["active_session_id"]
    await alice.send({"type": "message", "content": "hello", "client_msg_id": "sw-1"})
    await alice.until("turn_committed")
    await command(alice, "/new", "session_changed")
    changed = await command(alice, f"/switch {first.rsplit(':', 1)[-1]}", "session_changed")
    history = await alice.until("session_history")
    assert changed["session_id"] == first and changed["active"] is True
    assert [m["content"] for m in history["messages"]] == ["hello", "First dialog answer."]
    assert [
        i["session_id"] for i in (await command(alice, "/sessions", "sessions"))["items"] if i["active"]
    ] == [first]
    # The unified id works too; errors: no argument, bob's dialog (short or unified id).
    assert (await command(alice, f"/switch {first}", "session_changed"))["session_id"] == first
    await alice.until("session_history")
    assert (await command(alice, "/switch", "error"))["code"] == "invalid_command"
    bobs = ready_b["active_session_id"]
    assert (await command(alice, f"/switch {bobs.rsplit(':', 1)[-1]}", "error"))["code"] == "not_found"
    assert (await command(alice, f"/switch {bobs}", "error"))["code"] == "not_found"
    await assert_no_cross_talk(bob)


async def test_rename_sets_a_user_title_that_sessions_shows(connect):
    alice, bob, ready, ready_b = await two_chats(connect)
    changed = await command(alice, "/rename  Budget   2027 ", "session_changed")
    assert (changed["session_id"], changed["title"], changed["active"]) == (
        ready["active_session_id"],
        "Budget 2027",
        True,
    )
    assert (await dialog_row(changed["session_id"])).title_is_default is False
    items = (await command(alice, "/sessions", "sessions"))["items"]
    assert items[0]["title"] == "Budget 2027"
    assert (await command(alice, "/rename", "error"))["code"] == "invalid_command"
    assert (await command(alice, "/rename " + "y" * 201, "error"))["code"] == "invalid_command"
    error = await command(alice, "/rename mine now", "error", session_id=ready_b["active_session_id"])
    assert error["code"] == "not_found"
    assert (await dialog_row(ready_b["active_session_id"])).title == "New chat"
    await assert_no_cross_talk(bob)


async def test_delete_the_active_dialog_activates_the_most_recent_other(connect):
    alice, bob, ready, ready_b = await two_chats(connect)
    first = ready["active_session_id"]
    second = (await command(alice, "/new Second", "session_changed"))["session_id"]
    await alice.until("notification")
    deleted = await command(alice, "/delete", "session_changed")
    assert (deleted["session_id"], deleted.get("deleted"), deleted["active"]) == (second, True, False)
    active = await alice.until("session_changed")
    assert (active["session_id"], active["active"]) == (first, True)
    assert [i["session_id"] for i in (await command(alice, "/sessions", "sessions"))["items"]] == [first]
    assert (await dialog_row(second)).deleted_at is not None, "soft delete: the row stays for purge"
    # Gone for the user at once: switching or writing to it answers not_found.
    assert (await command(alice, f"/switch {second}", "error"))["code"] == "not_found"
    error = await command(alice, "hello?", "error", session_id=second, client_msg_id="del-1")
    assert (error["code"], error["client_msg_id"]) == ("not_found", "del-1")
    # Deleting the last dialog leaves a new empty one, welcomed.
    await command(alice, "/delete", "session_changed")
    fresh = await alice.until("session_changed")
    assert fresh["active"] is True and fresh["session_id"] not in (first, second)
    assert (await alice.until("notification"))["session_id"] == fresh["session_id"]
    # Errors: bob's dialog, two arguments.
    assert (await command(alice, f"/delete {ready_b['active_session_id']}", "error"))["code"] == "not_found"
    assert (await command(alice, "/delete a b", "error"))["code"] == "invalid_command"
    assert (await dialog_row(ready_b["active_session_id"])).deleted_at is None
    await assert_no_cross_talk(bob)


async def test_delete_a_named_dialog_keeps_the_active_one(connect):
    alice, bob, ready, _ = await two_chats(connect)
    first = ready["active_session_id"]
    second = (await command(alice, "/new", "session_changed"))["session_id"]
    deleted = await command(alice, f"/delete {first.rsplit(':', 1)[-1]}", "session_changed")
    assert deleted["session_id"] == first and deleted["deleted"] is True
    items = (await command(alice, "/sessions", "sessions"))["items"]
    assert [(i["session_id"], i["active"]) for i in items] == [(second, True)]


async def test_delete_drops_queued_messages_and_stops_the_running_turn(connect, start_worker):
    """Deleting a dialog is a generation change (seed 003 §8.3): its running turn stops (the tool is
    cancelled), commits nothing and publishes no terminal snapshot; its rows end ``done``, and
    nobody is ever told it was "interrupted by a restart"."""
    release, cancelled = asyncio.Event(), asyncio.Event()

    async def wait_forever(arguments: dict) -> str:
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "done"

    tools = ToolRegistry(
        [Tool("slow", "waits", {"type": "object", "properties": {}}, wait_forever, timeout=60)]
    )
    worker = await start_worker(
        ScriptedProvider([script_tool_call("call-1", "slow", {})], delay=0), tools=tools
    )
    alice, bob, ready, _ = await two_chats(connect)
    session = ready["active_session_id"]
    await alice.send({"type": "message", "content": "run slow", "client_msg_id": "d-1"})
    running = await alice.until(
        "turn_updated", lambda f: any(b["type"] == "tool" for b in f["turn"]["blocks"])
    )
    turn_id = running["turn"]["id"]
    await alice.send({"type": "message", "content": "queued", "client_msg_id": "d-2"})
    await alice.until("ack", lambda f: f["client_msg_id"] == "d-2")
    await alice.send({"type": "message", "content": "/delete"})
    await alice.until("session_changed", lambda f: f.get("deleted") and f["session_id"] == session)
    await asyncio.wait_for(cancelled.wait(), 10)  # the turn stopped: its tool was cancelled
    assert not release.is_set()
    for _ in range(200):
        if session not in worker.executors:
            break
        await asyncio.sleep(0.05)
    assert session not in worker.executors
    while not await alice.communicator.receive_nothing(timeout=0.3):
        await alice.recv()
    assert not [
        f
        for f in alice.of_type("turn_updated")
        if f["turn"]["id"] == turn_id and f["turn"]["status"] != "running"
    ]
    assert not [f for f in alice.of_type("turn_committed") if f["session_id"] == session]
    assert not [f for f in alice.of_type("notification") if "interrupted" in f["content"]]

    @database_sync_to_async
    def state() -> tuple[dict, list]:
        inbox = {
            c: (status, error, sent is not None)
            for c, status, error, sent in InboxMessage.objects.filter(dialog_id=session).values_list(
                "client_msg_id", "status", "error", "notice_sent_at"
            )
        }
        rows = list(Message.objects.filter(dialog_id=session).order_by("seq").values_list("role", "content"))
        return inbox, rows

    inbox, rows = await state()
    assert rows == [("user", "run slow")], "nothing of the turn was committed into the deleted dialog"
    assert inbox["d-1"] == ("done", "the dialog was deleted", True), (
        "its notice counts as sent: no restart notice"
    )
    assert inbox["d-2"][:2] == ("done", "the dialog was deleted"), (
        "a deleted dialog's queued message never runs"
    )


async def test_info_reports_ids_counts_model_and_usage(connect, start_worker):
    await start_worker(ScriptedProvider([script_text("Hi there.", usage=(120, 30))]))
    alice, bob, ready, ready_b = await two_chats(connect)
    await alice.send({"type": "message", "content": "hello", "client_msg_id": "i-1"})
    await alice.until("turn_committed")
    notice = await command(alice, "/info", "notification")
    info = notice["info"]
    assert info["session_id"] == ready["active_session_id"] == notice["session_id"]
    assert (info["message_count"], info["total_message_count"], info["history_revision"]) == (1, 2, 2)
    assert info["usage"] == {
        "calls": 1,
        "input_tokens": 120,
        "output_tokens": 30,
        "cached_tokens": 0,
        "cost": 0.0,
    }
    assert info["active"] is True
    for text in (
        info["dialog_id"],
        "messages: 2 in history, 1 from you",
        "120 in, 30 out",
        "created:",
        "model:",
    ):
        assert text in notice["content"]
    assert (await command(alice, "/info please", "error"))["code"] == "invalid_command"
    error = await command(alice, "/info", "error", session_id=ready_b["active_session_id"])
    assert error["code"] == "not_found"
    await assert_no_cross_talk(bob)


def info_of(usage: tuple, *, total: int, from_you: int) -> dict:
    """``usage``: (input, output) or (input, output, cached, calls, cost)."""
    inp, out, cached, calls, cost = usage if len(usage) == 5 else (*usage, 0, 1, 0.0)
    return {
        "title": "New chat",
        "active": True,
        "dialog_id": "d-1",
        "session_id": "cli_chat:1:d-1",
        "total_message_count": total,
        "message_count": from_you,
        "queued": 0,
        "running": False,
        "created_at": 0,
        "last_active_at": 0,
        "model": "m",
        "usage": {
            "calls": calls if inp or out else 0,
            "input_tokens": inp,
            "output_tokens": out,
            "cached_tokens": cached,
            "cost": cost,
        },
        "compacted_through_seq": 0,
    }


@pytest.mark.parametrize(
    ("usage", "total", "from_you", "line"),
    [
        ((120, 30), 2, 1, "tokens used: 120 in, 30 out in 1 call · cost 0.0000"),
        (
            (12480, 930, 8192, 7, 0.02131),
            4,
            2,
            "tokens used: 12,480 in, 930 out (8,192 cached) in 7 calls · cost 0.0213",
        ),
        ((0, 0), 2, 1, "tokens used: not reported by the provider"),
        ((0, 0), 0, 0, "tokens used: none yet"),
        ((0, 0), 1, 1, "tokens used: none yet"),
    ],
)
def test_info_says_when_the_provider_reported_no_usage(usage, total, from_you, line):
    text = format_info(info_of(usage, total=total, from_you=from_you))
    assert line in text.splitlines()
    assert "0 in, 0 out" not in text


async def test_stop_with_nothing_running_says_so(connect):
    alice, bob, ready, ready_b = await two_chats(connect)
    notice = await command(alice, "/stop", "notification")
    assert notice["content"] == "Nothing is running." and notice["session_id"] == ready["active_session_id"]
    assert (await command(alice, "/stop now", "error"))["code"] == "invalid_command"
    assert (await command(alice, "/stop", "error", session_id=ready_b["active_session_id"]))[
        "code"
    ] == "not_found"
    await assert_no_cross_talk(bob)


@pytest.mark.parametrize("content", ["/frobnicate", "/", "/NEWS today"])
async def test_unknown_commands_get_a_hint_and_no_model_call(connect, start_worker, content):
    provider = ScriptedProvider([])
    await start_worker(provider)
    alice, bob, _, _ = await two_chats(connect)
    error = await command(alice, content, "error", client_msg_id="cmd-1")
    assert error["code"] == "unknown_command" and "/help" in error["message"]
    assert provider.requests == [] and not alice.of_type("ack")


async def test_help_lists_every_command(connect):
    alice, bob, _, _ = await two_chats(connect)
    content = (await command(alice, "/help", "notification"))["content"]
    for usage in (
        "/new [title]",
        "/sessions",
        "/switch <dialog_id>",
        "/rename <title>",
        "/delete",
        "/compact",
        "/info",
        "/stop",
        "/help",
    ):
        assert usage in content
    await assert_no_cross_talk(bob)


async def test_a_second_connection_of_the_chat_follows_the_active_dialog(connect):
    token = await make_token()
    one, two = await connect(token), await connect(token)
    await one.until("ready")
    await two.until("ready")
    await one.send({"type": "message", "content": "/new"})
    changed = await two.until("session_changed")
    assert changed["active"] is True
    await one.send({"type": "message", "content": "/rename Shared"})
    assert (await two.until("session_changed"))["title"] == "Shared"


async def test_commands_are_answered_while_a_tool_of_the_same_dialog_runs(connect, start_worker):
    """/sessions and /stop do not wait behind the running turn (event order, not time)."""
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(arguments: dict) -> str:
        started.set()
        await release.wait()
        return "finished"

    tools = ToolRegistry([Tool("slow", "waits", {"type": "object", "properties": {}}, slow, timeout=120)])
    await start_worker(
        ScriptedProvider([script_tool_call("call-slow", "slow", {}), script_text("late")]), tools=tools
    )
    alice, bob, ready, _ = await two_chats(connect)
    await alice.send({"type": "message", "content": "do the slow thing", "client_msg_id": "cp-1"})
    await alice.until(
        "turn_updated",
        lambda f: any(b["type"] == "tool" and b["status"] == "running" for b in f["turn"]["blocks"]),
    )
    await asyncio.wait_for(started.wait(), 10)
    sessions = await command(alice, "/sessions", "sessions")
    assert sessions["items"][0]["session_id"] == ready["active_session_id"]
    assert not release.is_set(), "the answer came while the tool was still inside its call"
    await alice.send({"type": "message", "content": "/stop"})
    final = await alice.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "cancelled" and final["turn"]["error"] == "stopped"
    assert not release.is_set()
    tool = [b for b in final["turn"]["blocks"] if b["type"] == "tool"]
    assert [b["id"] for b in tool] == ["call-slow"]
    kinds = [f["type"] for f in alice.frames]
    assert kinds.index("sessions") < len(kinds) - 1 - kinds[::-1].index("turn_updated")


async def test_compact_summarises_older_history_and_reports_when_done(connect, start_worker, settings):
    settings.PICOBOT = settings.PICOBOT.replace(compact_keep_messages=2)
    provider = ScriptedProvider(
        [
            script_text("one"),
            script_text("two"),
            script_text("three"),
            script_text("The user counted to three with the assistant."),
        ]
    )
    await start_worker(provider)
    alice, bob, ready, ready_b = await two_chats(connect)
    for n, word in enumerate(["first", "second", "third"]):
        await alice.send({"type": "message", "content": word, "client_msg_id": f"cp-{n}"})
        await alice.until(
            "turn_committed", lambda f, n=n: f["messages"][0]["content"] == ["first", "second", "third"][n]
        )
    done = await command(alice, "/compact", "notification")
    assert done["level"] == "info" and done["session_id"] == ready["active_session_id"]
    assert "Compacted 4 earlier message" in done["content"]
    row = await dialog_row(ready["active_session_id"])
    assert row.summary == "The user counted to three with the assistant." and row.summary_seq == 4
    assert (await command(alice, "/compact now", "error"))["code"] == "invalid_command"
    assert (await command(alice, "/compact", "error", session_id=ready_b["active_session_id"]))[
        "code"
    ] == "not_found"
    await assert_no_cross_talk(bob)


async def test_compact_failure_is_reported_and_changes_nothing(connect, start_worker, settings):
    settings.PICOBOT = settings.PICOBOT.replace(compact_keep_messages=1)
    from providers.errors import ServerError

    await start_worker(
        ScriptedProvider([script_text("one"), script_text("two"), ServerError("boom", http_status=500)])
    )
    alice, bob, ready, _ = await two_chats(connect)
    for n in range(2):
        await alice.send({"type": "message", "content": f"m{n}", "client_msg_id": f"cf-{n}"})
        await alice.until("turn_committed", lambda f, n=n: f["messages"][0]["content"] == f"m{n}")
    failed = await command(alice, "/compact", "notification")
    assert failed["level"] == "error" and failed["content"].startswith("Compaction failed")
    assert "boom" not in failed["content"], "raw provider errors stay in the log"
    assert (await dialog_row(ready["active_session_id"])).summary_seq == 0


async def test_compact_with_the_offline_replay_provider_says_a_model_is_needed(connect):
    from conversations.runtime.provider import set_provider
    from providers.replay import ReplayProvider

    set_provider(ReplayProvider())
    try:
        alice, bob, _, _ = await two_chats(connect)
        notice = await command(alice, "/compact", "notification")
        assert notice["level"] == "error" and "configured model" in notice["content"]
    finally:
        set_provider(None)
