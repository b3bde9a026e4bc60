"""``GET /api/dialogs/{session_id}/messages/{message_id}/media/{index}`` (PROTOCOL §2): the images a
user message carried, at the URLs its history row names (``media[].url``), through Django's whole
HTTP stack (the URL-encoded id, token and session authentication)."""

from __future__ import annotations

import base64

import pytest
from channels.db import database_sync_to_async
from django.test import AsyncClient

from conversations import storage
from conversations.auth import get_or_create_user
from tests.conversations.api.conftest import user_with_token
from tests.conversations.api.test_http import bearer, session_client

pytestmark = [pytest.mark.django_db(transaction=True)]

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
WEBP = base64.b64encode(b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8).decode()


@database_sync_to_async
def sent_with_images(username: str) -> dict:
    """A user message with a PNG and a WebP in ``username``'s cli_chat dialog, started (it is in
    history) and answered; returns its history page's rows by role."""
    user, _ = get_or_create_user(username)
    chat = str(user.pk)
    dialog = storage.active_dialog(user, "cli_chat", chat)
    media = [{"mime_type": "image/png", "data": PNG}, {"mime_type": "image/webp", "data": WEBP}]
    storage.accept_message(user, "cli_chat", chat, "look", session_id=dialog.id, media=media)
    epoch = storage.claim_lease(dialog.id, "w1", 15_000)
    start = storage.start_next_turn(dialog.id, "w1", epoch)
    reply = {
        "id": start.reply_message_id,
        "role": "assistant",
        "content": "Two pixels.",
        "turn_id": start.turn_id,
    }
    storage.commit_turn(dialog.id, "w1", epoch, start.inbox_id, [reply], outcome="completed")
    rows = storage.history_page(user, dialog.id)["messages"]
    return {"session_id": dialog.id, "user": rows[0], "assistant": rows[1]}


async def test_the_owner_gets_each_image_with_its_type_and_cache_headers_by_token():
    _, token = await user_with_token("alice")
    sent = await sent_with_images("alice")
    client = AsyncClient()
    page = await client.get(f"/api/dialogs/{sent['session_id']}/messages", headers=bearer(token))
    assert page.json()["messages"][0]["media"] == sent["user"]["media"], "REST history names them too"
    assert [m["mime_type"] for m in sent["user"]["media"]] == ["image/png", "image/webp"]
    assert "%3A" in sent["user"]["media"][0]["url"], "the dialog id is URL-encoded"
    for item, data in zip(sent["user"]["media"], (PNG, WEBP), strict=True):
        response = await client.get(item["url"], headers=bearer(token))
        assert response.status_code == 200, response.content
        assert response.content == base64.b64decode(data)
        assert response["Content-Type"] == item["mime_type"]
        assert response["Cache-Control"].startswith("private, max-age=")
        assert int(response["Cache-Control"].split("max-age=")[1].split(",")[0]) > 86400
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response["Content-Disposition"] == "inline"
    raw_id = sent["user"]["media"][0]["url"].replace("%3A", ":")
    assert (await client.get(raw_id, headers=bearer(token))).content == base64.b64decode(PNG)


async def test_the_webui_session_cookie_reads_an_image():
    client = await session_client("alice")
    sent = await sent_with_images("alice")
    response = await client.get(sent["user"]["media"][1]["url"])
    assert response.status_code == 200 and response.content == base64.b64decode(WEBP)
    assert (await AsyncClient().get(sent["user"]["media"][1]["url"])).status_code == 401, "no credentials"


async def test_another_users_image_is_not_found_like_an_unknown_one():
    sent = await sent_with_images("alice")
    _, bob = await user_with_token("bob")
    response = await AsyncClient().get(sent["user"]["media"][0]["url"], headers=bearer(bob))
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert (await (await session_client("bob")).get(sent["user"]["media"][0]["url"])).status_code == 404


@pytest.mark.parametrize(
    "change",
    [
        lambda url, sent: url[: -len("/0")] + "/2",  # past the last image
        lambda url, sent: url[: -len("/0")] + "/99999999999",
        lambda url, sent: url[: -len("/0")] + "/-1",
        lambda url, sent: url[: -len("/0")] + "/x",
        lambda url, sent: url.replace(sent["user"]["id"], sent["assistant"]["id"]),  # not a user row
        lambda url, sent: url.replace(sent["user"]["id"], "00000000-0000-4000-8000-000000000000"),
        lambda url, sent: url.replace(sent["user"]["id"], "not-a-uuid"),
    ],
    ids=["past the end", "huge", "negative", "not a number", "assistant row", "unknown", "not an id"],
)
async def test_a_bad_index_or_message_is_not_found(change):
    _, token = await user_with_token("alice")
    sent = await sent_with_images("alice")
    response = await AsyncClient().get(change(sent["user"]["media"][0]["url"], sent), headers=bearer(token))
    assert response.status_code == 404 and response.json()["code"] == "not_found"


async def test_the_image_path_answers_other_methods_with_405_and_head_with_the_headers():
    _, token = await user_with_token("alice")
    sent = await sent_with_images("alice")
    url = sent["user"]["media"][0]["url"]
    refused = await AsyncClient().post(url, headers=bearer(token))
    assert refused.status_code == 405 and refused["Allow"] == "GET, HEAD"
    head = await AsyncClient().head(url, headers=bearer(token))
    assert head.status_code == 200 and head["Content-Type"] == "image/png" and not head.content
