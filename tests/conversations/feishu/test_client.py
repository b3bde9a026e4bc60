"""FeishuClient over real HTTP: the tenant token's cache and refresh, codes on any status (FEISHU.md §1–§2)."""

from __future__ import annotations

import asyncio

import pytest

from conversations.feishu.client import FeishuClient
from delivery.platforms.feishu.api import FeishuApiError, FeishuTransportError
from tests.conversations.feishu.fake_server import APP_ID, APP_SECRET, BOT_OPEN_ID


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def client(feishu_server):
    clock = Clock()
    client = FeishuClient(feishu_server.url, APP_ID, APP_SECRET, timeout=5.0, clock=clock)
    client.clock = clock
    yield client
    await client.aclose()


async def test_the_token_is_fetched_once_single_flight_and_reused_until_shortly_before_expiry(
    client, feishu_server
):
    bots = await asyncio.gather(*(client.bot_info() for _ in range(10)))
    assert {bot["open_id"] for bot in bots} == {BOT_OPEN_ID}
    assert feishu_server.token_requests() == 1
    client.clock.now = 7200 - 601  # still more than 10 minutes left
    await client.bot_info()
    assert feishu_server.token_requests() == 1
    client.clock.now = 7200 - 599
    await client.bot_info()
    assert feishu_server.token_requests() == 2


@pytest.mark.parametrize("status", [400, 200])
async def test_an_invalid_token_is_dropped_and_the_call_retried_once(client, feishu_server, status):
    feishu_server.token_error_status = status  # peers saw token errors with HTTP 200
    chat = "oc_1"
    user = feishu_server.api.user_message(chat, "hi")
    await client.bot_info()
    feishu_server.revoke_tokens()
    message_id = await client.reply_message(user, "text", {"text": "answer"}, uuid="u-1")
    assert feishu_server.token_requests() == 2
    assert [m.message_id for m in feishu_server.api.bot_messages(chat)] == [message_id]


async def test_a_token_refused_again_after_the_refresh_is_an_error_not_a_loop(client, feishu_server):
    await client.bot_info()
    feishu_server.revoke_tokens()
    feishu_server.tokens = _InvalidTokens(feishu_server.tokens)  # every new token is refused too
    with pytest.raises(FeishuApiError) as info:
        await client.bot_info()
    assert info.value.code == 99991663
    assert feishu_server.token_requests() == 2


class _InvalidTokens(dict):
    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, False)


async def test_a_business_error_raises_with_its_code_log_id_and_rate_limit_reset(client, feishu_server):
    feishu_server.api.fail("send_message", 99991400, http_status=429, retry_after=3)
    with pytest.raises(FeishuApiError) as info:
        await client.send_message("oc_1", "text", {"text": "x"}, uuid="u-2")
    error = info.value
    assert (error.code, error.http_status, error.retry_after, error.log_id) == (
        99991400,
        429,
        3.0,
        "fake-log-id",
    )
    assert error.rate_limited


async def test_no_answer_is_a_transport_error(client, feishu_server):
    feishu_server.api.fail("send_message", None)
    with pytest.raises(FeishuTransportError):
        await client.send_message("oc_1", "text", {"text": "x"}, uuid="u-3")


async def test_wrong_credentials_are_an_api_error_and_the_secret_is_never_shown(feishu_server):
    client = FeishuClient(feishu_server.url, APP_ID, "wrong-secret-value", timeout=5.0)
    try:
        with pytest.raises(FeishuApiError) as info:
            await client.bot_info()
        assert info.value.code == 10014
        assert "wrong-secret-value" not in str(info.value) and "wrong-secret-value" not in repr(client)
    finally:
        await client.aclose()


async def test_a_resource_is_downloaded_as_bytes(client, feishu_server):
    feishu_server.images["img_1"] = b"\x89PNG\r\n\x1a\n" + b"0" * 10
    data, content_type = await client.get_resource("om_1", "img_1", "image")
    assert data.startswith(b"\x89PNG") and content_type == "image/png"
    with pytest.raises(FeishuApiError):
        await client.get_resource("om_1", "missing", "image")
