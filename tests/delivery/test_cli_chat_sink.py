from __future__ import annotations

import json

from channels.layers import InMemoryChannelLayer

from delivery.coordinator import DeliveryCoordinator
from delivery.events import TextDelta
from delivery.groups import chat_group
from delivery.outbound import OutboundMessage
from delivery.platforms.cli_chat import CliChatSender, CliChatSink, turn_updated_frame
from delivery.presentation import PresentationPolicy, serialize_snapshot
from delivery.sinks import Snapshot
from delivery.turn import TurnController


async def test_group_members_receive_the_same_json_string():
    layer = InMemoryChannelLayer()
    group = chat_group("cli_chat", "7")
    watchers = [await layer.new_channel() for _ in range(2)]
    for channel in watchers:
        await layer.group_add(group, channel)
    c = TurnController("t1", "cli_chat:7:d1", "m1")
    c.apply(TextDelta(0, "héllo 界"))
    snapshot = c.snapshot()
    payload = serialize_snapshot(snapshot, PresentationPolicy.websocket())

    await CliChatSink(layer, group).update(snapshot, payload)

    for channel in watchers:
        message = await layer.receive(channel)
        assert message == {
            "type": "turn.snapshot",
            "turn_id": "t1",
            "session_id": "cli_chat:7:d1",
            "revision": 1,
            "terminal": False,
            "json": payload,
        }
    await CliChatSink(layer, group, inbox_id="in-1").finish(snapshot, payload)
    assert (await layer.receive(watchers[0]))["inbox_id"] == "in-1", "the turn's user message rides along"


async def test_a_coordinated_turn_reaches_a_watcher_and_ends_terminal():
    layer = InMemoryChannelLayer()
    group = chat_group("cli_chat", "7")
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    c = TurnController("t1", "cli_chat:7:d1", "m1")
    sink = CliChatSink(layer, group, min_interval=0.0)
    assert sink.live_policy == Snapshot(0.0)
    handle = DeliveryCoordinator(c, sink, PresentationPolicy.websocket()).start()
    c.apply(TextDelta(0, "hi"))
    c.complete()
    assert (await handle.wait(timeout=2)).ok
    messages = []
    while True:
        message = await layer.receive(channel)
        messages.append(message)
        if message["terminal"]:
            break
    assert [m["revision"] for m in messages] == sorted({m["revision"] for m in messages})
    final = json.loads(messages[-1]["json"])
    assert final["status"] == "completed" and final["blocks"][0]["text"] == "hi"


def test_turn_updated_frame_wraps_the_payload_without_reserialising():
    payload = '{"id":"t","blocks":[{"text":"界"}]}'
    frame = turn_updated_frame(payload)
    assert frame == '{"type":"turn_updated","turn":' + payload + "}"
    assert json.loads(frame) == {"type": "turn_updated", "turn": json.loads(payload)}


async def test_a_notification_frame_carries_the_idempotency_key_and_the_turn():
    layer = InMemoryChannelLayer()
    channel = await layer.new_channel()
    await layer.group_add(chat_group("cli_chat", "7"), channel)
    sender = CliChatSender(layer)
    assert sender.idempotent is False, "group_send is at-most-once: the dispatcher must not retry it"
    message = OutboundMessage(
        "cli_chat", "7", "hi 界", level="warning", session_id="cli_chat:7:d", turn_id="t1"
    )
    await sender(message)
    received = await layer.receive(channel)
    assert received["type"] == "chat.frame"
    assert json.loads(received["json"]) == {
        "type": "notification",
        "id": message.id,
        "level": "warning",
        "content": "hi 界",
        "session_id": "cli_chat:7:d",
        "turn_id": "t1",
    }
