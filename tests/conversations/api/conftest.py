"""Fixtures of the REST API tests: users and API clients. The gateway's fixtures apply too: its
autouse ones (fast worker loops, an empty runtime session cache) imported here, the others
(tokens, an agent worker, WebSocket clients) from tests/conversations/conftest.py."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from ninja.testing import TestAsyncClient

from conversations.api import api
from conversations.auth import create_token, get_or_create_user
from tests.conversations.gateway_fixtures import fast_picobot, fresh_runtime_sessions  # noqa: F401 - autouse here


@database_sync_to_async
def user_with_token(username: str) -> tuple[object, str]:
    """``(user, raw token)`` for ``username`` (created if needed)."""
    user, _ = get_or_create_user(username)
    return user, create_token(user)


class ApiClient:
    """``ninja.testing.TestAsyncClient(api)`` that sends ``Authorization: Bearer <token>``."""

    def __init__(self, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = TestAsyncClient(api, headers=headers)
        self.token = token

    def __getattr__(self, name: str) -> object:
        return getattr(self.client, name)


@pytest.fixture
async def alice() -> ApiClient:
    _, token = await user_with_token("alice")
    return ApiClient(token)


@pytest.fixture
async def bob() -> ApiClient:
    _, token = await user_with_token("bob")
    return ApiClient(token)
