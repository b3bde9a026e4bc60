"""WebSocket authentication (PROTOCOL §1 "Authentication", DESIGN §9)."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client

from conversations.auth import get_or_create_user
from conversations.models import ApiToken
from picobot_site.asgi import application
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]


@database_sync_to_async
def session_cookie(username: str = "carol") -> str:
    user, _ = get_or_create_user(username)
    client = Client()
    client.force_login(user)
    return client.cookies[django_settings.SESSION_COOKIE_NAME].value


async def first_frame(headers: list, path: str = "/ws/chat/") -> tuple[dict, WebsocketCommunicator]:
    communicator = WebsocketCommunicator(application, path, headers=headers)
    await communicator.connect(timeout=5)
    return await communicator.receive_json_from(timeout=5), communicator


async def test_session_cookie_from_an_allowed_origin_is_accepted():
    cookie = await session_cookie()
    headers = [(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://localhost:8000"),
               (b"host", b"localhost:8000")]
    frame, comm = await first_frame(headers)
    assert frame["type"] == "ready" and frame["user"] == "carol"
    await comm.disconnect()


@pytest.mark.parametrize(
    "origin",
    [b"http://evil.example", None, b"http://localhost:3000", b"https://127.0.0.1:9999", b"null",
     b"https://localhost:8000"],
)
async def test_session_cookie_from_another_origin_is_refused(origin):
    cookie = await session_cookie()
    headers = [(b"cookie", f"sessionid={cookie}".encode()), (b"host", b"localhost:8000")]
    if origin:
        headers.append((b"origin", origin))
    frame, comm = await first_frame(headers)
    assert frame["code"] == "unauthorized"
    assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}


async def test_a_trusted_origin_from_settings_is_accepted(settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://chat.example.com"]
    cookie = await session_cookie()
    headers = [(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"https://chat.example.com"),
               (b"host", b"127.0.0.1:8000")]
    frame, comm = await first_frame(headers)
    assert frame["type"] == "ready"
    await comm.disconnect()


async def test_token_in_the_query_string_is_accepted_without_an_origin():
    token = await make_token("dave")
    frame, comm = await first_frame([], path=f"/ws/chat/?token={token}")
    assert frame["type"] == "ready" and frame["user"] == "dave"
    await comm.disconnect()


async def test_a_revoked_token_is_refused():
    token = await make_token("erin")
    await database_sync_to_async(lambda: ApiToken.objects.update(revoked_at=1))()
    frame, comm = await first_frame([(b"authorization", f"Bearer {token}".encode())])
    assert frame["code"] == "unauthorized"


async def test_tokens_are_stored_hashed():
    token = await make_token("frank")
    stored = await database_sync_to_async(lambda: list(ApiToken.objects.values_list("token_hash", "prefix")))()
    assert stored == [(ApiToken.hash_token(token), token[:8])]
    assert token not in stored[0][0]


async def test_an_unknown_websocket_path_is_refused_not_an_error():
    communicator = WebsocketCommunicator(application, "/ws/nowhere/")
    connected, code = await communicator.connect(timeout=5)
    assert connected is False
