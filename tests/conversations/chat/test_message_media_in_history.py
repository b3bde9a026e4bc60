"""Images a user attached reach every client through history (PROTOCOL §1 "History message"
``media``): ``turn_committed`` and a later ``session_history`` name them by URL, never carry the
base64 data, and the URL answers the bytes (PROTOCOL §2)."""

from __future__ import annotations

import base64
import json

import pytest
from django.test import AsyncClient

from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 16).decode()


async def test_a_sent_messages_images_come_back_in_history_as_urls_on_every_connection(connect, start_worker):
    await start_worker(ScriptedProvider([script_text("Two pictures.")]))
    token = await make_token()
    sender = await connect(token)
    sid = (await sender.until("ready"))["active_session_id"]
    media = [{"mime_type": "image/png", "data": PNG}, {"mime_type": "image/jpeg", "data": JPEG}]
    await sender.send({"type": "message", "content": "look", "client_msg_id": "img-1", "media": media})
    message_id = (await sender.until("ack"))["message_id"]
    committed = await sender.until("turn_committed")

    user, answer = committed["messages"]
    assert user["id"] == message_id and answer["media"] == []
    assert [m["mime_type"] for m in user["media"]] == ["image/png", "image/jpeg"]
    assert all(m["url"].endswith(f"/messages/{message_id}/media/{i}") for i, m in enumerate(user["media"]))

    later = await connect(token)  # another client, after the reload: only history
    await later.until("ready")
    await later.send({"type": "history", "session_id": sid})
    page = await later.until("session_history")
    rows = {m["id"]: m for m in page["messages"]}
    assert rows[message_id]["media"] == user["media"]
    for client in (sender, later):
        history_frames = [f for f in client.frames if f["type"] in ("turn_committed", "session_history")]
        assert PNG not in json.dumps(history_frames) and JPEG not in json.dumps(history_frames)

    http = AsyncClient()
    for item, data in zip(user["media"], (PNG, JPEG), strict=True):
        got = await http.get(item["url"], headers={"Authorization": f"Bearer {token}"})
        assert got.status_code == 200 and got.content == base64.b64decode(data)
        assert got["Content-Type"] == item["mime_type"]
