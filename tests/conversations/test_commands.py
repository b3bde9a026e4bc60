"""Slash commands over cli_chat (PROTOCOL "Slash commands"): answered on the control path."""

from __future__ import annotations

import pytest

from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]


async def test_new_creates_an_active_dialog_and_welcomes(connect):
    client = await connect(await make_token())
    ready = await client.until("ready")
    await client.send({"type": "message", "content": "/new Trip plans"})
    changed = await client.until("session_changed")
    assert changed["active"] is True and changed["title"] == "Trip plans"
    assert changed["session_id"] != ready["active_session_id"]
    welcome = await client.until("notification")
    assert welcome["session_id"] == changed["session_id"]
    await client.send({"type": "sessions"})
    items = (await client.until("sessions"))["items"]
    assert [(i["session_id"], i["active"]) for i in items][0] == (changed["session_id"], True)
    assert {i["session_id"] for i in items} == {changed["session_id"], ready["active_session_id"]}
    assert not client.of_type("ack"), "commands are not messages"


async def test_switch_makes_a_dialog_active_and_sends_its_history(connect, start_worker):
    await start_worker(ScriptedProvider([script_text("First dialog answer.")]))
    client = await connect(await make_token())
    ready = await client.until("ready")
    first = ready["active_session_id"]
    await client.send({"type": "message", "content": "hello", "client_msg_id": "sw-1"})
    await client.until("turn_committed")
    await client.send({"type": "message", "content": "/new"})
    await client.until("session_changed")
    await client.send({"type": "message", "content": f"/switch {first.rsplit(':', 1)[-1]}"})
    changed = await client.until("session_changed")
    history = await client.until("session_history")
    assert changed["session_id"] == first and changed["active"] is True
    assert [m["content"] for m in history["messages"]] == ["hello", "First dialog answer."]
    await client.send({"type": "message", "content": "/sessions"})
    items = (await client.until("sessions"))["items"]
    assert [i["session_id"] for i in items if i["active"]] == [first]


async def test_a_second_connection_of_the_chat_follows_the_active_dialog(connect):
    token = await make_token()
    one, two = await connect(token), await connect(token)
    await one.until("ready")
    await two.until("ready")
    await one.send({"type": "message", "content": "/new"})
    changed = await two.until("session_changed")
    assert changed["active"] is True


@pytest.mark.parametrize(
    ("command", "code"),
    [("/switch", "invalid_command"), ("/switch nope", "not_found"), ("/frobnicate", "unknown_command"),
     ("/rename x", "command_unavailable")],
)
async def test_bad_commands_get_a_helpful_error_and_no_model_call(connect, start_worker, command, code):
    provider = ScriptedProvider([])
    await start_worker(provider)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": command, "client_msg_id": "cmd-1"})
    error = await client.until("error")
    assert error["code"] == code and error["message"]
    assert provider.requests == []


async def test_help_lists_the_commands(connect):
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "/help"})
    notice = await client.until("notification")
    assert "/switch <dialog_id>" in notice["content"] and "/new [title]" in notice["content"]


async def test_stop_command_cancels_the_running_turn(connect, start_worker):
    await start_worker(ScriptedProvider([script_text(" ".join(f"w{i}" for i in range(300)))], delay=0.01))
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "talk", "client_msg_id": "st-1"})
    await client.until("turn_updated", lambda f: bool(f["turn"]["blocks"]))
    await client.send({"type": "message", "content": "/stop"})
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert (final["turn"]["status"], final["turn"]["error"]) == ("cancelled", "stopped")
