"""Fixtures of the Feishu channel's tests: the fake Open API over HTTP, an installed platform, events.

The gateway's autouse fixtures apply too: fast worker loops, an empty runtime session cache.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from conversations.feishu.client import FeishuClient
from conversations.feishu.platform import FeishuConfig, FeishuPlatform, install, uninstall
from tests.conversations.feishu.fake_server import APP_ID, APP_SECRET, BOT_OPEN_ID, FakeFeishuServer
from tests.conversations.gateway_fixtures import fast_picobot, fresh_runtime_sessions  # noqa: F401 - autouse here

VERIFICATION_TOKEN = "verification-token-for-tests"
CHAT = "oc_p2p_chat"
GROUP = "oc_group_chat"
USER = "ou_user_1"

_ids = itertools.count(1)


def message_event(
    message_id: str,
    text: str = "hello",
    *,
    chat_id: str = CHAT,
    chat_type: str = "p2p",
    mention_bot: bool = False,
    message_type: str = "text",
    content: dict | None = None,
    create_time_ms: int | None = None,
    token: str = VERIFICATION_TOKEN,
) -> dict:
    """An ``im.message.receive_v1`` event body (schema 2.0) as the platform sends it (FEISHU.md §6)."""
    mentions = []
    if mention_bot:
        mentions.append(
            {
                "key": "@_user_1",
                "id": {"open_id": BOT_OPEN_ID, "union_id": "on_bot"},
                "name": "PicoBot",
                "tenant_key": "t",
            }
        )
        text = f"@_user_1 {text}"
    sent = str(create_time_ms if create_time_ms is not None else int(time.time() * 1000))
    return {
        "schema": "2.0",
        "header": {
            "event_id": f"ev_{next(_ids)}",
            "event_type": "im.message.receive_v1",
            "create_time": sent,
            "token": token,
            "app_id": APP_ID,
            "tenant_key": "tenant",
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": USER, "union_id": "on_user"},
                "sender_type": "user",
                "tenant_key": "t",
            },
            "message": {
                "message_id": message_id,
                "create_time": sent,
                "update_time": sent,
                "chat_id": chat_id,
                "chat_type": chat_type,
                "message_type": message_type,
                "content": json.dumps(content if content is not None else {"text": text}, ensure_ascii=False),
                "mentions": mentions,
            },
        },
    }


def config(server: FakeFeishuServer, **overrides: object) -> FeishuConfig:
    values = {
        "mode": "webhook",
        "app_id": APP_ID,
        "app_secret": APP_SECRET,
        "verification_token": VERIFICATION_TOKEN,
        "encrypt_key": "",
        "api_base": server.url,
    }
    values.update(overrides)
    return FeishuConfig(**values)


def make_platform(server: FakeFeishuServer, **overrides: object) -> FeishuPlatform:
    """A platform talking to ``server`` over HTTP, installed as the process's Feishu channel."""
    cfg = config(server, **overrides)
    return install(
        FeishuPlatform(cfg, api=FeishuClient(cfg.api_base, cfg.app_id, cfg.app_secret, timeout=5.0))
    )


@pytest.fixture
def feishu_server() -> Iterator[FakeFeishuServer]:
    with FakeFeishuServer() as server:
        yield server


@pytest.fixture
async def feishu(feishu_server: FakeFeishuServer) -> AsyncIterator[FeishuPlatform]:
    """The installed platform (webhook mode) against the fake; uninstalled and stopped after."""
    platform = make_platform(feishu_server)
    yield platform
    await platform.stop(timeout=2)
    uninstall()
