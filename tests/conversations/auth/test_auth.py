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
    headers = [
        (b"cookie", f"sessionid={cookie}".encode()),
        (b"origin", b"http://localhost:8000"),
        (b"host", b"localhost:8000"),
    ]
    frame, comm = await first_frame(headers)
    assert frame["type"] == "ready" and frame["user"] == "carol"
    await comm.disconnect()


@pytest.mark.parametrize(
    "origin",
    [
        b"http://evil.example",
        None,
        b"http://localhost:3000",
        b"https://127.0.0.1:9999",
        b"null",
        b"https://localhost:8000",
    ],
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
    headers = [
        (b"cookie", f"sessionid={cookie}".encode()),
        (b"origin", b"https://chat.example.com"),
        (b"host", b"127.0.0.1:8000"),
    ]
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
    stored = await database_sync_to_async(
        lambda: list(ApiToken.objects.values_list("token_hash", "prefix"))
    )()
    assert stored == [(ApiToken.hash_token(token), token[:8])]
    assert token not in stored[0][0]


async def test_an_unknown_websocket_path_is_refused_not_an_error():
    communicator = WebsocketCommunicator(application, "/ws/nowhere/")
    connected, code = await communicator.connect(timeout=5)
    assert connected is False


# --- revoking a token ends what it opened -----------------------------------------------------------


@database_sync_to_async
def revoke_all(username: str) -> None:
    ApiToken.objects.filter(user__username=username).update(revoked_at=1)


def token_login(username: str, token: str) -> Client:
    """A WebUI session logged in with an API token as the password (``ApiTokenBackend``)."""
    client = Client()
    response = client.post("/login/", {"username": username, "password": token})
    assert response.status_code == 302, "logged in"
    return client


async def test_a_webui_session_logged_in_with_a_token_ends_when_the_token_is_revoked():
    token = await make_token("gina")
    client = await database_sync_to_async(token_login)("gina", token)
    assert (await database_sync_to_async(client.get)("/")).status_code == 200
    session_key = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    headers = [
        (b"cookie", f"sessionid={session_key}".encode()),
        (b"origin", b"http://localhost:8000"),
        (b"host", b"localhost:8000"),
    ]
    frame, comm = await first_frame(headers)
    assert frame["type"] == "ready", "the session opens the chat while the token is live"
    await comm.disconnect()

    await revoke_all("gina")
    frame, comm = await first_frame(headers)
    assert frame["code"] == "unauthorized", "a new WebSocket with that session is refused at once"
    assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    response = await database_sync_to_async(client.get)("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/"), "logged out"
    assert (await database_sync_to_async(client.get)("/")).status_code == 302, "and stays logged out"


async def test_a_password_session_is_not_ended_by_revoking_one_of_the_users_tokens():
    @database_sync_to_async
    def password_login() -> Client:
        user, _ = get_or_create_user("hank")
        user.set_password("a-long-password-1")
        user.save()
        client = Client()
        assert (
            client.post("/login/", {"username": "hank", "password": "a-long-password-1"}).status_code == 302
        )
        return client

    await make_token("hank")
    client = await password_login()
    await revoke_all("hank")
    assert (await database_sync_to_async(client.get)("/")).status_code == 200


@pytest.mark.parametrize("how", ["bearer", "session"])
async def test_an_open_websocket_is_closed_when_its_token_is_revoked(monkeypatch, how):
    monkeypatch.setattr("conversations.auth.websocket.REVOCATION_CHECK_SECONDS", 0.1)
    token = await make_token("iris")
    if how == "bearer":
        headers = [(b"authorization", f"Bearer {token}".encode())]
    else:
        client = await database_sync_to_async(token_login)("iris", token)
        session_key = client.cookies[django_settings.SESSION_COOKIE_NAME].value
        headers = [
            (b"cookie", f"sessionid={session_key}".encode()),
            (b"origin", b"http://localhost:8000"),
            (b"host", b"localhost:8000"),
        ]
    other = await make_token("iris")  # another token of the same user: its socket stays open
    frame, comm = await first_frame(headers)
    assert frame["type"] == "ready"
    kept, kept_comm = await first_frame([(b"authorization", f"Bearer {other}".encode())])
    assert kept["type"] == "ready"

    await database_sync_to_async(
        lambda: ApiToken.objects.filter(token_hash=ApiToken.hash_token(token)).update(revoked_at=1)
    )()
    while True:
        output = await comm.receive_output(timeout=5)
        if output["type"] == "websocket.close":
            break
    assert output["type"] == "websocket.close" and output["code"] == 4401
    assert "revoked" in output["reason"]
    await kept_comm.send_json_to({"type": "ping", "nonce": "n"})
    assert (await kept_comm.receive_json_from(timeout=5)) == {"type": "pong", "nonce": "n"}
    await kept_comm.disconnect()


@pytest.mark.parametrize("change", ["deactivated", "password changed", "deleted"])
async def test_an_open_password_session_websocket_is_closed_when_its_user_is_deactivated_or_changes_password(
    monkeypatch, change
):
    """Deactivation (README: "their tokens and sessions stop working at once") and a password
    change (Django ends the user's HTTP sessions) end the open sockets of a password login too;
    another user's socket stays."""
    monkeypatch.setattr("conversations.auth.websocket.REVOCATION_CHECK_SECONDS", 0.1)
    jill = await session_cookie("jill")
    kept_cookie = await session_cookie("kate")

    def cookie_headers(cookie: str) -> list:
        return [
            (b"cookie", f"sessionid={cookie}".encode()),
            (b"origin", b"http://localhost:8000"),
            (b"host", b"localhost:8000"),
        ]

    frame, comm = await first_frame(cookie_headers(jill))
    assert frame["type"] == "ready"
    kept, kept_comm = await first_frame(cookie_headers(kept_cookie))
    assert kept["type"] == "ready"

    @database_sync_to_async
    def apply_change() -> None:
        user, _ = get_or_create_user("jill")
        if change == "deactivated":
            user.is_active = False
            user.save()
        elif change == "password changed":
            user.set_password("a-brand-new-password-2")
            user.save()
        else:
            user.delete()

    await apply_change()
    while True:
        output = await comm.receive_output(timeout=5)
        if output["type"] == "websocket.close":
            break
    assert output["code"] == 4401 and "signed out" in output["reason"]
    await kept_comm.send_json_to({"type": "ping", "nonce": "k"})
    assert (await kept_comm.receive_json_from(timeout=5)) == {"type": "pong", "nonce": "k"}
    await kept_comm.disconnect()
    frame, comm = await first_frame(cookie_headers(jill))
    assert frame["code"] == "unauthorized", "and the session cannot open a new one"


async def test_the_rest_api_drops_a_session_whose_login_token_was_revoked():
    from django.test import AsyncClient

    token = await make_token("jade")
    client = AsyncClient()
    assert (await client.post("/login/", {"username": "jade", "password": token})).status_code == 302
    assert (await client.get("/api/dialogs")).status_code == 200
    await revoke_all("jade")
    response = await client.get("/api/dialogs")
    assert (response.status_code, response.json()["code"]) == (401, "unauthorized")


@pytest.mark.django_db
def test_get_or_create_user_normalises_the_name_like_the_login_form():
    user, created = get_or_create_user("ｆｕｌｌ")
    assert created and user.username == "full"
    assert get_or_create_user("full") == (user, False)
    assert get_or_create_user("ｆｕｌｌ") == (user, False)
