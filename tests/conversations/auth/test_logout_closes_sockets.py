"""Logging out in one tab ends every socket of that session within the revocation check, for a
password login and for a WebUI session logged in with a token; other sessions of the same user
stay (issue 16, Must show 3; the browser test: tests/e2e/test_webui_logout.py)."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.test import Client

from conversations.auth import create_token, get_or_create_user
from conversations.auth.tokens import dead_credentials
from picobot_site.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-password-1"


@database_sync_to_async
def logged_in(username: str, how: str) -> Client:
    """A browser (a test client with its cookie jar) logged in by password or with a token."""
    user, _ = get_or_create_user(username)
    if how == "password":
        if not user.has_usable_password():  # a new hash would end the user's other sessions
            user.set_password(PASSWORD)
            user.save()
        secret = PASSWORD
    else:
        secret = create_token(user)
    client = Client()
    assert client.post("/login/", {"username": username, "password": secret}).status_code == 302
    return client


async def tab(client: Client) -> WebsocketCommunicator:
    """A WebSocket of that browser's session (one tab), after its ``ready``."""
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    communicator = WebsocketCommunicator(
        application,
        "/ws/chat/",
        headers=[
            (b"cookie", f"sessionid={cookie}".encode()),
            (b"origin", b"http://localhost:8000"),
            (b"host", b"localhost:8000"),
        ],
    )
    await communicator.connect(timeout=5)
    assert (await communicator.receive_json_from(timeout=5))["type"] == "ready"
    return communicator


async def closed(communicator: WebsocketCommunicator) -> dict:
    while True:
        output = await communicator.receive_output(timeout=5)
        if output["type"] == "websocket.close":
            return output


@pytest.mark.parametrize("how", ["password", "token"])
async def test_logging_out_in_one_tab_closes_every_socket_of_that_session(monkeypatch, how):
    monkeypatch.setattr("conversations.auth.websocket.REVOCATION_CHECK_SECONDS", 0.1)
    browser = await logged_in("lena", how)
    other_browser = await logged_in("lena", how)
    first, second = await tab(browser), await tab(browser)
    elsewhere = await tab(other_browser)

    response = await database_sync_to_async(browser.post)("/logout/")
    assert response.status_code == 302

    for communicator in (first, second):
        output = await closed(communicator)
        assert output["code"] == 4401 and "signed out" in output["reason"]
    await second.send_json_to({"type": "message", "content": "still there?"})
    assert await second.receive_nothing(timeout=0.3), "a closed socket answers nothing"
    await elsewhere.send_json_to({"type": "ping", "nonce": "p"})
    assert await elsewhere.receive_json_from(timeout=5) == {"type": "pong", "nonce": "p"}, (
        "the user's other session stays"
    )
    await elsewhere.disconnect()


@pytest.mark.django_db
def test_dead_credentials_takes_at_most_three_queries_for_any_number(django_assert_max_num_queries):
    users = [get_user_model().objects.create_user(f"u{n}", password=PASSWORD) for n in range(5)]
    tokens = [create_token(user) for user in users]
    from conversations.models import ApiToken

    ids = list(ApiToken.objects.values_list("pk", flat=True))
    credentials = [("token", pk, None) for pk in ids]
    credentials += [("token", pk, f"key-of-token-{pk}") for pk in ids]
    credentials += [("session", u.pk, u.get_session_auth_hash(), f"key-{u.pk}") for u in users]
    with django_assert_max_num_queries(3):
        dead = dead_credentials(credentials)
    assert dead == {c for c in credentials if c[-1]}, "sessions that do not exist are dead; bare tokens live"
    assert tokens
