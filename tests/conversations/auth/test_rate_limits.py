"""Rate limits of API-token sign-ins per client address (REST, WebSocket handshake) and of
messages per user (WebSocket ``message``, REST send): issue 16, Must show 2; PROTOCOL §1, §2."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import AsyncClient

from conversations.auth import throttle
from conversations.models import InboxMessage
from picobot_site.asgi import application
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]

WRONG = "pb_" + "w" * 43


@pytest.fixture
def limits(monkeypatch):
    """Small limits and a clock the test moves: ``limits.now += 60``."""

    class Clock:
        now = 1000.0

    clock = Clock()
    monkeypatch.setattr(throttle, "_clock", lambda: clock.now)

    def apply(**changes: int) -> Clock:
        monkeypatch.setattr(django_settings, "PICOBOT", django_settings.PICOBOT.replace(**changes))
        throttle.reset_limits()
        return clock

    return apply


@pytest.fixture
def lookups(monkeypatch) -> list[str]:
    """Every token looked up in the database (REST and WebSocket)."""
    seen: list[str] = []
    from conversations.api import auth as api_auth
    from conversations.auth import websocket

    for module, name in ((api_auth, "user_for_token"), (websocket, "live_token")):
        original = getattr(module, name)

        def counted(raw, _original=original):
            seen.append(raw)
            return _original(raw)

        monkeypatch.setattr(module, name, counted)
    return seen


class AddressClient(AsyncClient):
    """An ``AsyncClient`` whose requests come from ``address`` (the ASGI ``client``)."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def _base_scope(self, **request):
        scope = super()._base_scope(**request)
        scope["client"] = [self.address, 0]
        return scope


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def test_rest_answers_429_after_too_many_failed_tokens_from_one_address_without_a_lookup(
    limits, lookups
):
    clock = limits(auth_failures_per_address=3, auth_failure_window_seconds=60)
    good = await make_token("rita")
    client = AddressClient("10.1.1.1")
    for _ in range(3):
        assert (await client.get("/api/dialogs", headers=bearer(WRONG))).status_code == 401
    clock.now += 10
    response = await client.get("/api/dialogs", headers=bearer(WRONG))
    assert response.status_code == 429
    body = response.json()
    assert body["code"] == "too_many_requests" and set(body) == {"code", "message", "ref"}
    assert response["Retry-After"] == "50" and "retry in 50 s" in body["message"]
    assert len(lookups) == 3, "the refused token was not looked up"
    refused = await client.get("/api/dialogs", headers=bearer(good))
    assert refused.status_code == 429, "even a good token waits: the address is refused"
    other = AddressClient("10.1.1.2")
    assert (await other.get("/api/dialogs", headers=bearer(good))).status_code == 200
    clock.now += 50
    assert (await client.get("/api/dialogs", headers=bearer(good))).status_code == 200, "the window passed"


async def test_good_tokens_are_not_counted(limits):
    limits(auth_failures_per_address=2)
    good = await make_token("sam")
    client = AddressClient("10.1.1.3")
    for _ in range(10):
        assert (await client.get("/api/dialogs", headers=bearer(good))).status_code == 200


async def test_a_zero_limit_turns_the_address_limit_off(limits):
    limits(auth_failures_per_address=0)
    client = AddressClient("10.1.1.4")
    for _ in range(30):
        assert (await client.get("/api/dialogs", headers=bearer(WRONG))).status_code == 401


async def handshake(token: str, address: str) -> tuple[list[dict], WebsocketCommunicator]:
    """The frames a token socket from ``address`` gets up to its first frame, and its close."""
    communicator = WebsocketCommunicator(
        application, "/ws/chat/", headers=[(b"authorization", f"Bearer {token}".encode())]
    )
    communicator.scope["client"] = [address, 50000]
    await communicator.connect(timeout=5)
    return [await communicator.receive_json_from(timeout=5)], communicator


async def test_the_websocket_handshake_is_closed_with_4429_after_too_many_failed_tokens(limits, lookups):
    clock = limits(auth_failures_per_address=3, auth_failure_window_seconds=60)
    good = await make_token("tina")
    for _ in range(3):
        frames, comm = await handshake(WRONG, "10.2.2.2")
        assert frames[0]["code"] == "unauthorized"
        assert (await comm.receive_output(timeout=5))["code"] == 4401
    clock.now += 20
    frames, comm = await handshake(good, "10.2.2.2")
    assert frames[0] == {
        "type": "error",
        "code": "too_many_requests",
        "message": "too many failed sign-ins from this address; retry in 40 s",
        "retry_after": 40,
    }
    assert await comm.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": 4429,
        "reason": "too many failed sign-ins from this address; retry in 40 s",
    }
    assert lookups == [WRONG] * 3, "the refused handshake looked nothing up"
    frames, comm = await handshake(good, "10.2.2.3")
    assert frames[0]["type"] == "ready", "another address is not affected"
    await comm.disconnect()


async def test_rest_and_websocket_failures_count_together_per_address(limits):
    limits(auth_failures_per_address=2)
    client = AddressClient("10.3.3.3")
    assert (await client.get("/api/dialogs", headers=bearer(WRONG))).status_code == 401
    frames, comm = await handshake(WRONG, "10.3.3.3")
    assert frames[0]["code"] == "unauthorized"
    assert (await client.get("/api/dialogs", headers=bearer(WRONG))).status_code == 429


# --- messages per user ----------------------------------------------------------------------------


async def test_a_websocket_message_past_the_rate_is_refused_with_retry_after_and_not_stored(limits, connect):
    clock = limits(user_messages_per_minute=3)
    token = await make_token("uma")
    client = await connect(token)
    for n in range(3):
        await client.send({"type": "message", "content": f"hello {n}", "client_msg_id": f"m{n}"})
        await client.until("ack", lambda f, n=n: f["client_msg_id"] == f"m{n}")
    clock.now += 15
    await client.send({"type": "message", "content": "one too many", "client_msg_id": "m3"})
    error = await client.until("error")
    assert error["code"] == "rate_limited" and error["retry_after"] == 45
    assert error["client_msg_id"] == "m3" and "45 s" in error["message"]
    stored = await database_sync_to_async(
        lambda: list(InboxMessage.objects.values_list("client_msg_id", flat=True))
    )()
    assert sorted(stored) == ["m0", "m1", "m2"], "the refused message was not stored"
    clock.now += 45
    await client.send({"type": "message", "content": "one too many", "client_msg_id": "m3"})
    ack = await client.until("ack", lambda f: f["client_msg_id"] == "m3")
    assert ack["message_id"], "sent again once the minute passed, it is accepted"


async def test_rest_send_past_the_rate_answers_429_rate_limited_and_counts_with_the_websocket(
    limits, connect
):
    limits(user_messages_per_minute=2)
    token = await make_token("vera")
    client = await connect(token)
    ready = await client.until("ready")
    await client.send({"type": "message", "content": "from the socket", "client_msg_id": "ws1"})
    await client.until("ack")
    http = AsyncClient()
    path = f"/api/dialogs/{ready['active_session_id']}/messages"
    first = await http.post(
        path, {"content": "from REST"}, content_type="application/json", headers=bearer(token)
    )
    assert first.status_code == 202
    second = await http.post(
        path, {"content": "again"}, content_type="application/json", headers=bearer(token)
    )
    assert second.status_code == 429
    assert second.json()["code"] == "rate_limited" and int(second["Retry-After"]) >= 1
    assert await database_sync_to_async(InboxMessage.objects.count)() == 2


async def test_the_message_rate_is_per_user(limits, connect):
    limits(user_messages_per_minute=1)
    first = await connect(await make_token("walt"))
    second = await connect(await make_token("xena"))
    for client in (first, second):
        await client.send({"type": "message", "content": "hi", "client_msg_id": "x"})
        await client.until("ack")


async def test_slash_commands_count_but_stop_never_does(limits, connect):
    """A user at the limit can still stop a turn by typing /stop, as with the Stop button."""
    limits(user_messages_per_minute=1)
    client = await connect(await make_token("yuri"))
    await client.until("ready")
    await client.send({"type": "message", "content": "/help", "client_msg_id": "h1"})
    await client.until("notification")
    await client.send({"type": "message", "content": "/help", "client_msg_id": "h2"})
    assert (await client.until("error"))["code"] == "rate_limited", "a command counts"
    for typed in ("/stop", "/STOP"):
        await client.send({"type": "message", "content": typed, "client_msg_id": "s"})
        answer = await client.until("notification")  # a rate_limited error instead: times out
        assert answer["content"] == "Nothing is running.", f"{typed} is never rate limited"
