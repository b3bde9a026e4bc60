"""POST /feishu/events/: verified, recorded once, answered at once; anything invalid refused (FEISHU.md §3–§4)."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from django.db import DatabaseError
from django.test import AsyncClient

from conversations.feishu import store
from conversations.feishu.envelope import MAX_BODY_BYTES
from conversations.feishu.platform import uninstall
from conversations.models import FeishuMessage, InboxMessage
from tests.conversations.feishu.conftest import VERIFICATION_TOKEN, make_platform, message_event
from tests.conversations.feishu.test_envelope import KEY, encrypt, signed

pytestmark = [pytest.mark.django_db(transaction=True)]
URL = "/feishu/events/"


@database_sync_to_async
def counts() -> tuple[int, int]:
    return FeishuMessage.objects.count(), InboxMessage.objects.count()


async def post(body: bytes, headers: dict | None = None):
    return await AsyncClient().post(URL, data=body, content_type="application/json", headers=headers or {})


async def test_the_url_verification_is_answered_with_its_challenge(feishu):
    body = {"type": "url_verification", "challenge": "ch-1", "token": VERIFICATION_TOKEN}
    response = await post(json.dumps(body).encode())
    assert response.status_code == 200 and response.json() == {"challenge": "ch-1"}


async def test_a_message_event_is_recorded_and_queued_in_its_dialog(feishu):
    response = await post(json.dumps(message_event("om_1", "hello")).encode())
    assert response.status_code == 200
    row = await database_sync_to_async(FeishuMessage.objects.select_related("inbox").get)(message_id="om_1")
    assert row.status == FeishuMessage.Status.ACCEPTED and row.inbox.content == "hello"
    assert row.inbox.dialog_id.startswith("feishu:oc_p2p_chat:")


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{broken", 400),
        (b'"just a string"', 400),
        (json.dumps(message_event("om_1", token="forged")).encode(), 401),
        (b"{" + b" " * MAX_BODY_BYTES + b"}", 413),
        (b"{" + b" " * (3 * 1024 * 1024) + b"}", 413),  # past Django's own 2.5 MiB limit too
        (b"[" * 100_000 + b"]" * 100_000, 400),  # nested too deep for the JSON parser
    ],
)
async def test_invalid_deliveries_are_refused_and_nothing_is_recorded(feishu, body, status):
    response = await post(body)
    assert response.status_code == status and "error" in response.json()
    assert await counts() == (0, 0)


async def test_with_an_encrypt_key_a_wrong_signature_is_refused_and_a_right_one_accepted(feishu_server):
    make_platform(feishu_server, encrypt_key=KEY)
    try:
        body = json.dumps({"encrypt": encrypt(json.dumps(message_event("om_1")).encode())}).encode()
        assert (await post(body, signed(body, "wrong key"))).status_code == 401
        assert await counts() == (0, 0)
        assert (await post(body, signed(body))).status_code == 200
        assert await counts() == (1, 1)
    finally:
        uninstall()


@pytest.mark.parametrize(
    "mutate",
    [
        lambda e: e["event"]["message"].update(mentions=5, chat_type="group"),
        lambda e: e["event"]["message"].update(message_type="post", content=json.dumps({"content": 5})),
        lambda e: e["event"]["message"].update(message_id="om_" + "x" * 100),
        lambda e: e["event"].update(message="not an object"),
    ],
)
async def test_malformed_events_with_the_right_token_are_acknowledged_and_ignored(feishu, mutate):
    event = message_event("om_1")
    mutate(event)
    assert (await post(json.dumps(event).encode())).status_code == 200
    assert await counts() == (0, 0)


async def test_the_path_without_its_slash_is_served_too(feishu):
    response = await AsyncClient().post(
        URL.rstrip("/"), data=json.dumps(message_event("om_1")).encode(), content_type="application/json"
    )
    assert response.status_code == 200 and await counts() == (1, 1)


async def test_event_types_not_handled_are_answered_200_so_the_platform_does_not_retry(feishu):
    event = message_event("om_1")
    event["header"]["event_type"] = "im.message.reaction.created_v1"
    response = await post(json.dumps(event).encode())
    assert response.status_code == 200 and await counts() == (0, 0)


async def test_a_message_that_could_not_be_recorded_is_answered_500_for_a_redelivery(feishu, monkeypatch):
    def broken(*args, **kwargs):
        raise DatabaseError("disk I/O error")

    monkeypatch.setattr(store, "record_message", broken)
    response = await post(json.dumps(message_event("om_1")).encode())
    assert response.status_code == 500


async def test_without_the_webhook_mode_the_path_is_not_found():
    response = await post(json.dumps(message_event("om_1")).encode())
    assert response.status_code == 404


async def test_only_post_is_allowed(feishu):
    assert (await AsyncClient().get(URL)).status_code == 405


async def test_while_the_bot_is_unknown_a_group_message_is_left_for_a_redelivery_and_p2p_goes_on(
    feishu, monkeypatch
):
    from delivery.platforms.feishu.api import FeishuTransportError
    from tests.conversations.feishu.conftest import GROUP

    asked = []

    async def unreachable():
        asked.append(1)
        raise FeishuTransportError("GET /open-apis/bot/v3/info: ConnectTimeout")

    monkeypatch.setattr(feishu.api, "bot_info", unreachable)
    group = message_event("om_g", "hi", chat_id=GROUP, chat_type="group", mention_bot=True)
    assert (await post(json.dumps(group).encode())).status_code == 503
    assert await counts() == (0, 0)
    asked.clear()
    assert (await post(json.dumps(message_event("om_p", "hi")).encode())).status_code == 200
    assert await counts() == (1, 1) and asked == []  # a p2p message never waits for the bot info
    monkeypatch.undo()
    assert (await post(json.dumps(group).encode())).status_code == 200  # the redelivery is taken
    assert await counts() == (2, 2)
