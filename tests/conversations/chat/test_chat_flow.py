"""The main job end to end over Channels' WebsocketCommunicator.

A real OpenAICompatProvider talks HTTP to a local server that streams recorded SSE bytes; the
WebSocket consumer, channel layer, agent worker, executor and storage are the real ones.
"""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async

from conversations.models import Dialog, InboxMessage, Message
from providers.openai_compat import OpenAICompatProvider
from providers.testing import LocalSSEServer, ScriptedProvider, script_text
from tests.conversations.conftest import make_token
from tests.conversations.streams import ANSWER, CALL_ID, answer_pieces, text_pieces, tool_call_pieces

pytestmark = [pytest.mark.django_db(transaction=True)]

SSE_HEADERS = {"content-type": "text/event-stream"}


def sse(pieces: list[bytes]) -> tuple[int, dict, list[bytes], float]:
    return (200, SSE_HEADERS, pieces, 0.0)


def provider_for(server: LocalSSEServer) -> OpenAICompatProvider:
    return OpenAICompatProvider(server.base_url, "test-key", "test-model", max_retries=0)


async def test_what_time_is_it_streams_reasoning_tool_and_answer_then_commits(connect, start_worker):
    async with LocalSSEServer([sse(tool_call_pieces()), sse(answer_pieces())]) as server:
        await start_worker(provider_for(server))
        client = await connect(await make_token())
        ready = await client.until("ready")
        assert ready["provider"] == {"name": "openai", "model": "test-model", "offline": False}

        await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "m-1"})
        ack = await client.until("ack")
        assert ack["client_msg_id"] == "m-1" and ack["session_id"] == ready["active_session_id"]
        committed = await client.until("turn_committed")

        updates = client.of_type("turn_updated")
        revisions = [u["turn"]["revision"] for u in updates]
        assert len(updates) >= 2
        assert revisions == sorted(set(revisions)), "revisions strictly increase"
        final = updates[-1]["turn"]
        assert final["status"] == "completed"
        assert final["message_id"] == committed["messages"][-1]["id"]
        tools = [b for b in final["blocks"] if b["type"] == "tool"]
        assert [(t["id"], t["name"], t["status"]) for t in tools] == [(CALL_ID, "current_time", "completed")]
        assert tools[0]["arguments"] == {"timezone": "UTC"}
        answer = "".join(b["text"] for b in final["blocks"] if b["type"] == "assistant")
        assert answer.strip() == ANSWER
        for update in updates:
            for block in update["turn"]["blocks"]:
                assert "<think>" not in block.get("text", "") and "</th" not in block.get("text", "")
        reasoning = " ".join(b["text"] for b in final["blocks"] if b["type"] == "reasoning")
        assert "current_time" in reasoning and "answer briefly" in reasoning
        # The completed snapshot is published before the turn_committed delta.
        assert client.frames.index(updates[-1]) < client.frames.index(committed)

        rows = committed["messages"]
        assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]
        assert rows[0]["content"] == "What time is it?" and rows[0]["id"] == ack["message_id"]
        assert (
            rows[1]["tool_calls"][0]["id"] == CALL_ID and rows[1]["tool_calls"][0]["name"] == "current_time"
        )
        assert rows[2]["tool_call_id"] == CALL_ID and rows[2]["is_error"] is False
        assert rows[2]["content"].endswith("+00:00")
        assert rows[3]["content"].strip() == ANSWER and "<think>" not in rows[3]["content"]
        assert [r["seq"] for r in rows] == [1, 2, 3, 4]
        assert committed["history_revision"] == 4

        # The second provider request has one system message, first, and the tool
        # result carries the model's tool_call_id.
        second = server.requests[1]["messages"]
        assert [m["role"] for m in second].count("system") == 1 and second[0]["role"] == "system"
        tool_messages = [m for m in second if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_messages] == [CALL_ID]
        assert second[-2]["tool_calls"][0]["id"] == CALL_ID


async def test_history_is_the_same_on_a_new_connection(connect, start_worker):
    async with LocalSSEServer([sse(text_pieces("Hello there."))]) as server:
        await start_worker(provider_for(server))
        token = await make_token()
        first = await connect(token)
        ready = await first.until("ready")
        await first.send({"type": "message", "content": "Hi", "client_msg_id": "h-1"})
        committed = await first.until("turn_committed")

        second = await connect(token)
        ready2 = await second.until("ready")
        assert ready2["active_session_id"] == ready["active_session_id"]
        await second.send({"type": "history", "session_id": ready2["active_session_id"]})
        history = await second.until("session_history")
        assert history["history_revision"] == committed["history_revision"] == 2
        assert [m["id"] for m in history["messages"]] == [m["id"] for m in committed["messages"]]
        assert history["has_more"] is False


async def test_same_client_msg_id_twice_persists_one_message(connect, start_worker):
    async with LocalSSEServer([sse(text_pieces("One answer."))]) as server:
        await start_worker(provider_for(server))
        client = await connect(await make_token())
        await client.until("ready")
        await client.send({"type": "message", "content": "Once", "client_msg_id": "dup-1"})
        first = await client.until("ack")
        await client.send({"type": "message", "content": "Once", "client_msg_id": "dup-1"})
        second = await client.until("ack")
        assert second["message_id"] == first["message_id"]
        await client.until("turn_committed")

    count = await database_sync_to_async(lambda: Message.objects.filter(role="user").count())()
    inbox = await database_sync_to_async(lambda: InboxMessage.objects.count())()
    assert (count, inbox) == (1, 1)


async def test_bad_frames_get_errors_and_the_connection_keeps_working(connect, start_worker):
    client = await connect(await make_token())
    await client.until("ready")
    await client.send("this is not json")
    assert (await client.until("error"))["code"] == "invalid_json"
    await client.send({"type": "teleport"})
    assert (await client.until("error"))["code"] == "unknown_type"
    await client.send({"type": "message", "content": 42, "client_msg_id": "bad-1"})
    error = await client.until("error")
    assert error["code"] == "invalid_frame" and error["client_msg_id"] == "bad-1"
    await client.send({"type": "history", "session_id": "cli_chat:999:nope"})
    assert (await client.until("error"))["code"] == "not_found"
    await client.send({"type": "message", "content": "x" * 70_000})
    assert (await client.until("error"))["code"] == "frame_too_large"
    await client.send({"type": "message", "content": "x" * 32_001})
    assert (await client.until("error"))["code"] == "content_too_long"
    await client.send(
        {"type": "message", "content": "pic", "media": [{"mime_type": "text/html", "data": "PGI+"}]}
    )
    assert (await client.until("error"))["code"] == "invalid_media"
    await client.send(
        {"type": "message", "content": "pic", "media": [{"mime_type": "image/png", "data": "%%%"}]}
    )
    assert (await client.until("error"))["code"] == "invalid_media"
    await client.send({"type": "history", "session_id": "cli_chat:1:a\x00b"})
    assert (await client.until("error"))["code"] == "invalid_frame"
    await client.send({"type": "history", "session_id": "x", "limit": 500})
    assert (await client.until("error"))["code"] == "invalid_frame"
    await client.send({"type": "ping", "nonce": "n1"})
    assert (await client.until("pong"))["nonce"] == "n1"


async def test_lone_surrogate_escapes_and_deep_nesting_in_frames_are_answered_cleanly(connect, start_worker):
    """A frame's ``"\\ud800"`` escape made a lone surrogate: the echoed ``client_msg_id`` could not
    be encoded (Daphne closed the socket, 1011) and ``/switch`` with one failed in SQLite. Pairs
    are rejoined, lone halves become U+FFFD; a frame nested too deep is invalid JSON, not a
    RecursionError."""
    await start_worker(ScriptedProvider([script_text("fine")]))
    client = await connect(await make_token())
    await client.until("ready")
    await client.send('{"type": "message", "content": "hi \\ud83d\\ude00", "client_msg_id": "a\\ud800"}')
    ack = await client.until("ack")
    assert ack["client_msg_id"] == "a\ufffd"
    json.dumps(ack, ensure_ascii=False).encode("utf-8")  # what Daphne does with every frame
    done = await client.until("turn_committed")
    assert done["messages"][0]["content"] == "hi \U0001f600"
    await client.send('{"type": "message", "content": "/switch x\\ud800y"}')
    error = await client.until("error")
    assert error["code"] == "not_found"
    json.dumps(error, ensure_ascii=False).encode("utf-8")
    await client.send('{"type": "ping", "nonce": ' + "[" * 5000 + "]" * 5000 + "}")
    assert (await client.until("error"))["code"] == "invalid_json"
    await client.send({"type": "ping", "nonce": "still-here"})
    assert (await client.until("pong"))["nonce"] == "still-here"


async def test_frames_over_the_websocket_budget_are_cut_to_fit_and_the_socket_stays(
    connect, start_worker, monkeypatch
):
    """A huge answer made every snapshot, ``turn_committed`` and later ``history`` page bigger
    than Daphne sends (it closed every socket of the chat with 1011). Frames now fit the budget,
    with the longest strings cut and marked; the database keeps the whole text."""
    budget = 40_000
    monkeypatch.setattr("conversations.chat.consumer.MAX_OUTGOING_FRAME_BYTES", budget)
    monkeypatch.setattr("conversations.chat.consumer._FIT_CHECK_CHARS", budget // 4)
    answer = "word " * 30_000  # 150 000 characters
    await start_worker(ScriptedProvider([script_text(answer)]))
    client = await connect(await make_token())
    ready = await client.until("ready")
    await client.send({"type": "message", "content": "talk a lot", "client_msg_id": "big-1"})
    committed = await client.until("turn_committed", timeout=20)
    shown = committed["messages"][-1]["content"]
    assert shown.startswith("word word") and "characters cut: too large for one WebSocket frame" in shown
    await client.send({"type": "history", "session_id": ready["active_session_id"]})
    page = await client.until("session_history")
    assert "characters cut" in page["messages"][-1]["content"]
    for frame in client.frames:
        assert len(json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode()) <= budget
    stored = await database_sync_to_async(
        lambda: Message.objects.filter(role="assistant").values_list("content", flat=True).get()
    )()
    assert stored == answer, "only the frame is cut, never the history"
    await client.send({"type": "ping", "nonce": "alive"})
    assert (await client.until("pong"))["nonce"] == "alive"


async def test_unauthenticated_connections_are_refused(connect):
    from channels.testing import WebsocketCommunicator

    from picobot_site.asgi import application

    for headers in ([], [(b"authorization", b"Bearer pb_wrong")], [(b"origin", b"http://evil.example")]):
        communicator = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
        await communicator.connect(timeout=5)
        frame = await communicator.receive_json_from(timeout=5)
        assert frame["type"] == "error" and frame["code"] == "unauthorized"
        closed = await communicator.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": 4401}


async def test_another_users_dialog_is_not_found(connect, start_worker):
    alice = await connect(await make_token("alice"))
    ready = await alice.until("ready")
    bob = await connect(await make_token("bob"))
    await bob.until("ready")
    await bob.send(
        {
            "type": "message",
            "content": "peek",
            "session_id": ready["active_session_id"],
            "client_msg_id": "b-1",
        }
    )
    error = await bob.until("error")
    assert error["code"] == "not_found" and error["client_msg_id"] == "b-1"
    await bob.send({"type": "history", "session_id": ready["active_session_id"]})
    assert (await bob.until("error"))["code"] == "not_found"


async def test_sessions_lists_the_active_dialog(connect):
    client = await connect(await make_token())
    ready = await client.until("ready")
    await client.send({"type": "sessions"})
    sessions = await client.until("sessions")
    assert [(i["session_id"], i["active"]) for i in sessions["items"]] == [(ready["active_session_id"], True)]


async def test_a_turn_left_started_by_a_dead_process_is_reported_interrupted(connect, start_worker):
    token = await make_token()
    client = await connect(token)
    ready = await client.until("ready")
    session_id = ready["active_session_id"]

    @database_sync_to_async
    def leave_a_started_turn() -> tuple[str, str]:
        from conversations import storage

        user = Dialog.objects.get(pk=session_id).owner
        storage.accept_message(user, "cli_chat", str(user.pk), "lost", client_msg_id="lost-1")
        epoch = storage.claim_lease(session_id, "dead-host:serve", 60_000)
        start = storage.start_next_turn(session_id, "dead-host:serve", epoch)
        Dialog.objects.filter(pk=session_id).update(lease_expires_at=0)  # the dead process's lease ran out
        return start.turn_id, start.reply_message_id

    turn_id, reply_id = await leave_a_started_turn()
    async with LocalSSEServer([sse(text_pieces("unused"))]) as server:
        await start_worker(provider_for(server))
        failed = await client.until("turn_updated", lambda f: f["turn"]["id"] == turn_id)
        assert failed["turn"]["status"] == "failed" and failed["turn"]["message_id"] == reply_id
        notice = await client.until("notification")
        assert notice["level"] == "warning" and "interrupted" in notice["content"]
    status = await database_sync_to_async(lambda: InboxMessage.objects.get(turn_id=turn_id).status)()
    assert status == "interrupted"


async def test_connections_stay_in_their_chat_group_past_the_layers_group_expiry(connect, settings):
    import asyncio

    from conversations.runtime.notify import publish_notification

    # Layers drop group members after group_expiry (24 h in production): shrink it to 1 s.
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"group_expiry": 1}}
    }
    settings.PICOBOT = settings.PICOBOT.replace(group_refresh_seconds=0.2)
    client = await connect(await make_token())
    ready = await client.until("ready")
    await asyncio.sleep(1.5)
    await publish_notification("cli_chat", ready["chat_id"], "info", "still here")
    assert (await client.until("notification"))["content"] == "still here"


async def test_a_connect_that_fails_half_way_leaves_no_group_refresher_behind(
    connect, start_worker, monkeypatch
):
    import asyncio

    from channels.layers import get_channel_layer
    from channels.testing import WebsocketCommunicator

    from picobot_site.asgi import application
    from providers.testing import ScriptedProvider, script_text

    await start_worker(ScriptedProvider([script_text(" ".join(f"w{i}" for i in range(300)))], delay=0.01))
    token = await make_token()
    first = await connect(token)
    await first.until("ready")
    await first.send({"type": "message", "content": "talk", "client_msg_id": "half-1"})
    await first.until("turn_updated")
    layer = get_channel_layer()
    real = layer.group_send

    async def broken(group, message):  # the layer fails right after `ready` was sent
        if message.get("type") == "turns.replay":
            raise ConnectionError("redis down")
        return await real(group, message)

    monkeypatch.setattr(layer, "group_send", broken)
    second = WebsocketCommunicator(
        application, "/ws/chat/", headers=[(b"authorization", f"Bearer {token}".encode())]
    )
    await second.connect(timeout=5)
    with pytest.raises(ConnectionError):
        while True:
            await second.receive_output(timeout=2)
    monkeypatch.setattr(layer, "group_send", real)
    refreshers = [t for t in asyncio.all_tasks() if "_refresh_groups" in repr(t.get_coro()) and not t.done()]
    assert len(refreshers) == 1, "only the first, healthy connection keeps refreshing its groups"
