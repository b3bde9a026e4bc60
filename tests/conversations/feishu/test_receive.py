"""Receiving is idempotent: one message, one turn — concurrently, after a restart, hours later (FEISHU.md §3)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from channels.db import database_sync_to_async

from conversations.feishu.platform import uninstall
from conversations.models import FeishuMessage, InboxMessage
from tests.conversations.feishu.conftest import GROUP, make_platform, message_event

pytestmark = [pytest.mark.django_db(transaction=True)]
HOUR_MS = 3_600_000


@database_sync_to_async
def inbox_rows() -> list[InboxMessage]:
    return list(InboxMessage.objects.order_by("received_at"))


@database_sync_to_async
def feishu_row(message_id: str) -> FeishuMessage:
    return FeishuMessage.objects.get(message_id=message_id)


async def test_the_same_message_delivered_twice_concurrently_is_queued_once(feishu):
    event = message_event("om_1", "hello")
    results = await asyncio.gather(*(feishu.receiver.receive(event) for _ in range(4)))
    assert sorted(results) == ["accepted", "duplicate", "duplicate", "duplicate"]
    assert len(await inbox_rows()) == 1


async def test_a_redelivery_after_a_restart_and_seven_hours_later_starts_nothing(feishu, feishu_server):
    event = message_event("om_1", "hello")
    assert await feishu.receiver.receive(event) == "accepted"
    uninstall()  # the process restarts: a new platform, nothing in memory
    restarted = make_platform(feishu_server)
    try:
        assert await restarted.receiver.receive(event) == "duplicate"
        later = int(time.time() * 1000) + 7 * HOUR_MS  # the platform's last retry (15 s, 5 min, 1 h, 6 h)
        restarted.receiver.clock_ms = lambda: later
        assert await restarted.receiver.receive(event) == "duplicate"
    finally:
        await restarted.stop(timeout=1)
    assert len(await inbox_rows()) == 1


async def test_a_message_first_received_past_the_max_age_is_acknowledged_and_not_answered(feishu):
    sent = int(time.time() * 1000) - 13 * HOUR_MS
    result = await feishu.receiver.receive(message_event("om_old", "hello", create_time_ms=sent))
    assert result.startswith("ignored: first received 13.0 h after it was sent")
    row = await feishu_row("om_old")
    assert row.status == FeishuMessage.Status.IGNORED and await inbox_rows() == []
    # and it is remembered: a later redelivery is a duplicate
    assert await feishu.receiver.receive(message_event("om_old", "hello", create_time_ms=sent)) == "duplicate"


async def test_a_group_message_needs_a_mention_of_the_bot(feishu):
    plain = message_event("om_1", "hello all", chat_id=GROUP, chat_type="group")
    assert (await feishu.receiver.receive(plain)).startswith("ignored: a group message")
    mention = message_event("om_2", "hello bot", chat_id=GROUP, chat_type="group", mention_bot=True)
    assert await feishu.receiver.receive(mention) == "accepted"
    (row,) = await inbox_rows()
    assert row.content == "hello bot" and row.dialog_id.startswith(f"feishu:{GROUP}:")


async def test_chats_outside_the_allow_list_are_acknowledged_and_not_answered(feishu_server):
    platform = make_platform(feishu_server, allowed_chats=("oc_allowed",))
    try:
        result = await platform.receiver.receive(message_event("om_1", "hi"))
        assert result == "ignored: chat not in PICOBOT_FEISHU_ALLOWED_CHATS"
        assert (
            await platform.receiver.receive(message_event("om_2", "hi", chat_id="oc_allowed")) == "accepted"
        )
    finally:
        await platform.stop(timeout=1)
        uninstall()
    assert len(await inbox_rows()) == 1


async def test_images_are_fetched_after_the_acknowledgement_and_queued_with_the_text(feishu, feishu_server):
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    feishu_server.images["img_1"] = png
    post = {
        "title": "",
        "content": [[{"tag": "text", "text": "what is this?"}], [{"tag": "img", "image_key": "img_1"}]],
    }
    event = message_event("om_img", message_type="post", content=post)
    assert await feishu.receiver.receive(event) == "pending"
    for _ in range(100):
        if await inbox_rows():
            break
        await asyncio.sleep(0.05)
    (row,) = await inbox_rows()
    assert row.content == "what is this?" and len(row.media) == 1 and row.media[0]["mime_type"] == "image/png"
    assert (await feishu_row("om_img")).status == FeishuMessage.Status.ACCEPTED


async def test_a_file_gets_one_reply_saying_what_can_be_read_and_no_turn(feishu, feishu_server):
    user = feishu_server.api.user_message("oc_p2p_chat", "(a file)")
    event = message_event(user, message_type="file", content={"file_key": "f_1", "file_name": "a.pdf"})
    assert await feishu.receiver.receive(event) == "ignored: message type 'file' not handled"
    assert await feishu.receiver.receive(event) == "duplicate"
    for _ in range(100):
        if feishu_server.api.bot_messages("oc_p2p_chat"):
            break
        await asyncio.sleep(0.05)
    (reply,) = feishu_server.api.bot_messages("oc_p2p_chat")
    assert reply.reply_to == user and "text, rich text and images" in reply.text and "(file)" in reply.text
    assert await inbox_rows() == []


@pytest.mark.parametrize("sent", ["99999999999999999999999", "-5", "abc", ""])
async def test_an_implausible_send_time_is_not_an_error_and_the_message_is_answered(feishu, sent):
    event = message_event("om_t", "hello")
    event["header"]["create_time"] = event["event"]["message"]["create_time"] = sent
    assert await feishu.receiver.receive(event) == "accepted"
    assert (await feishu_row("om_t")).sent_at == 0


async def test_the_long_connection_handler_acknowledges_a_body_that_is_not_json_and_records_nothing(feishu):
    await feishu.receive_raw(b"\xff not json")  # returns: the SDK acks 200, nothing to redeliver
    assert await inbox_rows() == []
    await feishu.receive_raw(json.dumps(message_event("om_lc", "hi")).encode())
    assert [row.content for row in await inbox_rows()] == ["hi"]
