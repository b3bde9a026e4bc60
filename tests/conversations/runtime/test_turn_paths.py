"""Turn paths beyond the happy one: stop, failures, tool errors, late joiners, slow clients."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from conversations.models import InboxMessage, Message
from providers.chunks import Done, TextDelta
from providers.errors import OverloadedError
from providers.testing import ScriptedProvider, script_text, script_tool_call
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]


def long_text(words: int) -> str:
    return " ".join(f"w{i}" for i in range(words))


async def test_stop_cancels_the_running_turn_and_keeps_the_partial_answer(connect, start_worker):
    full = long_text(400)
    provider = ScriptedProvider([script_text(full)], delay=0.01)
    await start_worker(provider)
    client = await connect(await make_token())
    ready = await client.until("ready")
    await client.send({"type": "message", "content": "talk", "client_msg_id": "s-1"})
    await client.until("turn_updated", lambda f: any(b["type"] == "assistant" for b in f["turn"]["blocks"]))
    await client.send({"type": "stop", "session_id": ready["active_session_id"]})
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "cancelled"
    committed = await client.until("turn_committed")
    assistant = committed["messages"][-1]
    assert assistant["role"] == "assistant" and assistant["completion_status"] == "cancelled"
    assert assistant["content"] and full.startswith(assistant["content"]) and assistant["content"] != full


async def test_stop_when_nothing_runs_answers_with_a_notification(connect):
    client = await connect(await make_token())
    ready = await client.until("ready")
    await client.send({"type": "stop", "session_id": ready["active_session_id"]})
    notice = await client.until("notification")
    assert notice["content"] == "Nothing is running."


async def test_provider_failure_before_text_fails_the_turn_without_an_assistant_row(connect, start_worker):
    await start_worker(ScriptedProvider([OverloadedError("upstream overloaded", http_status=503)]))
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "hi", "client_msg_id": "f-1"})
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "failed" and "overloaded" in final["turn"]["error"]
    committed = await client.until("turn_committed")
    assert [m["role"] for m in committed["messages"]] == ["user"]


async def test_provider_failure_after_text_keeps_the_partial_answer_interrupted(connect, start_worker):
    chunks = [
        TextDelta("Half an"),
        TextDelta(" answer"),
        OverloadedError("connection reset", http_status=None),
    ]
    await start_worker(ScriptedProvider([chunks]))
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "hi", "client_msg_id": "f-2"})
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "failed"
    committed = await client.until("turn_committed")
    assistant = committed["messages"][-1]
    assert (assistant["content"], assistant["completion_status"]) == ("Half an answer", "interrupted")


async def test_unknown_tool_becomes_an_error_result_and_the_turn_goes_on(connect, start_worker):
    provider = ScriptedProvider(
        [script_tool_call("call_x1", "teleport", {"to": "mars"}), script_text("Cannot do that.")]
    )
    await start_worker(provider)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "go", "client_msg_id": "t-1"})
    committed = await client.until("turn_committed")
    tool_row = committed["messages"][2]
    assert tool_row["tool_call_id"] == "call_x1" and tool_row["is_error"] is True
    final = [f for f in client.of_type("turn_updated") if f["turn"]["status"] == "completed"][-1]["turn"]
    assert [b["status"] for b in final["blocks"] if b["type"] == "tool"] == ["failed"]
    second_request = provider.requests[1].messages
    assert second_request[-1].content[0].tool_call_id == "call_x1"


async def test_a_client_that_connects_mid_turn_gets_the_running_turn(connect, start_worker):
    provider = ScriptedProvider([script_text(long_text(300))], delay=0.01)
    await start_worker(provider)
    token = await make_token()
    first = await connect(token)
    await first.until("ready")
    await first.send({"type": "message", "content": "talk", "client_msg_id": "r-1"})
    running = await first.until("turn_updated", lambda f: len(f["turn"]["blocks"]) > 0)
    late = await connect(token)
    ready = await late.until("ready")
    assert [t["id"] for t in ready["running"]] == [running["turn"]["id"]]
    replayed = await late.until("turn_updated")
    assert replayed["turn"]["id"] == running["turn"]["id"] and replayed["turn"]["revision"] > 0
    await late.until("turn_updated", lambda f: f["turn"]["status"] == "completed", timeout=20)


async def test_a_client_that_never_acknowledges_gets_a_bounded_number_of_running_snapshots(
    connect, start_worker
):
    await start_worker(ScriptedProvider([script_text(long_text(200))], delay=0.005))
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "talk", "client_msg_id": "w-1"})
    await client.until("turn_committed", timeout=20)
    updates = [f["turn"] for f in client.of_type("turn_updated")]
    running = [u for u in updates if u["status"] == "running"]
    assert len(running) <= 4, "the seen credit window allows 4 unacknowledged running snapshots"
    assert updates[-1]["status"] == "completed"
    assert updates[-1]["blocks"][-1]["text"].endswith("w199")


async def test_messages_sent_during_a_turn_run_in_order_after_it(connect, start_worker):
    provider = ScriptedProvider([script_text("first answer"), script_text("second answer")], delay=0.02)
    await start_worker(provider)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "one", "client_msg_id": "q-1"})
    await client.send({"type": "message", "content": "two", "client_msg_id": "q-2"})
    acks = [await client.until("ack"), await client.until("ack")]
    assert [a["queued"] for a in acks] == [0, 1]
    first = await client.until("turn_committed")
    second = await client.until("turn_committed")
    assert [m["content"] for m in first["messages"]] == ["one", "first answer"]
    assert [m["content"] for m in second["messages"]] == ["two", "second answer"]
    assert [m["seq"] for m in first["messages"] + second["messages"]] == [1, 2, 3, 4]
    statuses = await database_sync_to_async(
        lambda: sorted(InboxMessage.objects.values_list("status", flat=True))
    )()
    assert statuses == ["done", "done"]


async def test_reasoning_only_answer_completes_without_inventing_text(connect, start_worker):
    await start_worker(ScriptedProvider([[*script_text("", reasoning="thinking only")[:-1], Done("length")]]))
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "hm", "client_msg_id": "ro-1"})
    committed = await client.until("turn_committed")
    final = [f for f in client.of_type("turn_updated") if f["turn"]["status"] == "completed"][-1]["turn"]
    assert final.get("empty_answer") is True
    assert not [b for b in final["blocks"] if b["type"] == "assistant"]
    assistant = committed["messages"][-1]
    assert assistant["content"] == "" and assistant["reasoning"] == "thinking only"
    count = await database_sync_to_async(lambda: Message.objects.filter(role="assistant").count())()
    assert count == 1


async def test_an_image_reaches_the_provider_with_the_runtime_context_in_the_same_message(
    connect, start_worker
):
    from providers.blocks import ImageBlock, TextBlock

    provider = ScriptedProvider([script_text("A red pixel.")])
    await start_worker(provider)
    client = await connect(await make_token())
    await client.until("ready")
    pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    await client.send(
        {
            "type": "message",
            "content": "what is this?",
            "client_msg_id": "img-1",
            "media": [{"mime_type": "image/png", "data": pixel}],
        }
    )
    await client.until("turn_committed")
    request = provider.requests[0].messages
    assert [m.role for m in request] == ["system", "user"]
    blocks = request[-1].content
    assert isinstance(blocks[0], TextBlock) and blocks[0].text.startswith(
        "what is this?\n\n[Runtime context: time="
    )
    assert blocks[1:] == [ImageBlock(mime_type="image/png", data=pixel)]


async def test_stop_during_a_slow_tool_ends_the_turn_and_keeps_the_tool_chain_valid(connect, start_worker):
    import asyncio

    from conversations.tools import Tool, ToolRegistry

    started = asyncio.Event()

    async def sleepy(arguments: dict) -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    tools = ToolRegistry(
        [Tool("sleepy", "sleeps", {"type": "object", "properties": {}}, sleepy, timeout=120)]
    )
    provider = ScriptedProvider([script_tool_call("call_slow", "sleepy", {}, text="Let me wait.")])
    await start_worker(provider, tools=tools)
    client = await connect(await make_token())
    ready = await client.until("ready")
    await client.send({"type": "message", "content": "wait", "client_msg_id": "slow-1"})
    await asyncio.wait_for(started.wait(), 10)
    await client.send({"type": "stop", "session_id": ready["active_session_id"]})
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running", timeout=5)
    assert final["turn"]["status"] == "cancelled"
    committed = await client.until("turn_committed")
    rows = committed["messages"]
    assert [r["role"] for r in rows] == ["user", "assistant", "tool"]
    assert rows[1]["content"] == "Let me wait." and rows[1]["tool_calls"][0]["id"] == "call_slow"
    assert rows[2]["tool_call_id"] == "call_slow" and rows[2]["is_error"] is True


async def test_nul_characters_from_user_and_model_are_stored_as_replacement_characters(connect, start_worker):
    await start_worker(ScriptedProvider([script_text("bad\x00byte")]))
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "nul\x00here", "client_msg_id": "nul-1"})
    committed = await client.until("turn_committed")
    assert [m["content"] for m in committed["messages"]] == ["nul\ufffdhere", "bad\ufffdbyte"]


async def test_a_commit_that_keeps_failing_fails_the_turn_and_leaves_no_phantom_running_turn(
    connect, start_worker, monkeypatch
):
    from django.db import OperationalError

    from conversations import storage

    def broken_commit(*args, **kwargs):
        raise OperationalError("disk I/O error")

    monkeypatch.setattr(storage, "commit_turn", broken_commit)
    await start_worker(ScriptedProvider([script_text("lost answer")]))
    token = await make_token()
    client = await connect(token)
    await client.until("ready")
    await client.send({"type": "message", "content": "save me", "client_msg_id": "c-1"})
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "failed" and "could not be saved" in final["turn"]["error"]
    notice = await client.until("notification")
    assert notice["level"] == "error"
    assert not client.of_type("turn_committed")
    status = await database_sync_to_async(lambda: InboxMessage.objects.get(client_msg_id="c-1").status)()
    assert status == "done"
    again = await connect(token)
    assert (await again.until("ready"))["running"] == []


async def test_very_long_tool_names_and_call_ids_from_the_model_are_stored_whole(connect, start_worker):
    long_id, long_name = "call_" + "x" * 300, "t" * 300
    provider = ScriptedProvider([script_tool_call(long_id, long_name, {}), script_text("ok")])
    await start_worker(provider)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "go", "client_msg_id": "long-1"})
    committed = await client.until("turn_committed")
    assert committed["messages"][1]["tool_calls"][0]["id"] == long_id
    assert (committed["messages"][2]["tool_call_id"], committed["messages"][2]["tool_name"]) == (
        long_id,
        long_name,
    )


async def test_a_worker_that_lost_its_lease_stops_publishing_the_turn(connect, start_worker):
    import asyncio

    from conversations.models import Dialog

    await start_worker(ScriptedProvider([script_text(long_text(3000))], delay=0.005))
    client = await connect(await make_token())
    ready = await client.until("ready")
    await client.send({"type": "message", "content": "talk", "client_msg_id": "lease-1"})
    await client.until("turn_updated", lambda f: bool(f["turn"]["blocks"]))

    async def read_and_ack(seconds: float) -> list[dict]:
        """Everything that arrives within ``seconds``, acknowledging snapshots like a live client."""
        got: list[dict] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while deadline - loop.time() > 0:
            # receive_nothing() waits without cancelling the app (a receive timeout would).
            if await client.communicator.receive_nothing(timeout=0.05, interval=0.01):
                continue
            frame = await client.recv()
            got.append(frame)
            if frame["type"] == "turn_updated":
                turn = frame["turn"]
                await client.send({"type": "seen", "turn_id": turn["id"], "revision": turn["revision"]})
        return got

    @database_sync_to_async
    def steal() -> None:  # another worker claims the dialog (as after an expired lease)
        Dialog.objects.filter(pk=ready["active_session_id"]).update(
            lease_owner="thief:serve", lease_epoch=99, lease_expires_at=2**62
        )

    before = await read_and_ack(0.3)
    assert before, "the turn was streaming before the lease was lost"
    await steal()
    await read_and_ack(1.5)  # > the renew interval (0.5 s): the old owner notices within it
    after = await read_and_ack(1.0)
    assert after == [], "a stale owner publishes nothing more: no snapshot, no terminal, no commit"
    assert all(f["turn"]["status"] == "running" for f in client.of_type("turn_updated"))
    assert not client.of_type("turn_committed")


async def test_a_model_that_reuses_a_tool_call_id_gets_unique_ids_and_the_turn_goes_on(connect, start_worker):
    provider = ScriptedProvider(
        [
            script_tool_call("call_0", "current_time", {}),
            script_tool_call("call_0", "current_time", {}),
            script_text("Done."),
        ]
    )
    await start_worker(provider)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "twice", "client_msg_id": "dup-call"})
    committed = await client.until("turn_committed")
    rows = committed["messages"]
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    first_id, second_id = rows[1]["tool_calls"][0]["id"], rows[3]["tool_calls"][0]["id"]
    assert first_id == "call_0" and second_id != "call_0"
    assert (rows[2]["tool_call_id"], rows[4]["tool_call_id"]) == (first_id, second_id)
    final = [f for f in client.of_type("turn_updated") if f["turn"]["status"] != "running"][-1]["turn"]
    assert final["status"] == "completed"
