"""Fixtures of the REST API tests: the gateway fixtures (fast worker loops, tokens, an agent worker,
WebSocket clients) plus users and API clients."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from ninja.testing import TestAsyncClient

from conversations.api import api
from conversations.auth import create_token, get_or_create_user
from tests.conversations.conftest import (  # noqa: F401 - fixtures re-exported for tests/api
    connect,
    fast_picobot,
    fresh_runtime_sessions,
    start_worker,
)


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
