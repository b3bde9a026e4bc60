"""Fixtures for gateway tests: users with tokens, an agent worker, WebSocket clients.

The autouse fixtures of the tests that run turns (fast worker loops, an empty runtime session
cache) are in ``gateway_fixtures.py``: the conftest.py of each package directory that runs turns
imports them, so the operator tools' tests (admin/, management/, transfer/) run without them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from conversations.auth import create_token, get_or_create_user
from conversations.runtime.provider import set_provider
from conversations.runtime.worker import AgentWorker


@database_sync_to_async
def make_token(username: str = "alice") -> str:
    """Create ``username`` (if needed) and return a fresh API token."""
    user, _ = get_or_create_user(username)
    return create_token(user)


class ChatClient:
    """A WebsocketCommunicator speaking PROTOCOL §1 frames, recording everything received."""

    def __init__(self, communicator: WebsocketCommunicator) -> None:
        self.communicator = communicator
        self.frames: list[dict] = []

    async def send(self, frame: dict | str) -> None:
        text = frame if isinstance(frame, str) else json.dumps(frame)
        await self.communicator.send_to(text_data=text)

    async def recv(self, timeout: float = 10) -> dict:
        frame = json.loads(await self.communicator.receive_from(timeout=timeout))
        self.frames.append(frame)
        return frame

    async def until(
        self, kind: str, predicate: Callable[[dict], bool] | None = None, timeout: float = 10
    ) -> dict:
        """Receive until a frame of type ``kind`` (matching ``predicate``) arrives; return it."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise AssertionError(
                    f"no {kind!r} frame within {timeout} s; got {[f['type'] for f in self.frames]}"
                )
            try:
                frame = await self.recv(timeout=remaining)
            except TimeoutError:
                raise AssertionError(
                    f"no {kind!r} frame within {timeout} s; got {[f['type'] for f in self.frames]}; "
                    f"errors: {[f for f in self.frames if f['type'] == 'error']}"
                ) from None
            if frame["type"] == kind and (predicate is None or predicate(frame)):
                return frame

    def of_type(self, kind: str) -> list[dict]:
        return [f for f in self.frames if f["type"] == kind]

    async def close(self) -> None:
        await self.communicator.disconnect()


@pytest.fixture
async def connect() -> AsyncIterator[Callable]:
    """``await connect(token)`` → a connected ChatClient that already received ``ready``."""
    from picobot_site.asgi import application

    clients: list[ChatClient] = []

    async def _connect(
        token: str | None, *, headers: list | None = None, path: str = "/ws/chat/"
    ) -> ChatClient:
        hdrs = list(headers or [])
        if token:
            hdrs.append((b"authorization", f"Bearer {token}".encode()))
        communicator = WebsocketCommunicator(application, path, headers=hdrs)
        connected, _ = await communicator.connect(timeout=10)
        assert connected
        client = ChatClient(communicator)
        clients.append(client)
        return client

    yield _connect
    for client in clients:
        await client.close()


@pytest.fixture
async def start_worker() -> AsyncIterator[Callable]:
    """``await start_worker(provider)`` → a running AgentWorker, stopped at teardown.

    Extra keyword arguments go to ``AgentWorker`` (e.g. ``sink_factory``, ``outbound``).
    """
    workers: list[AgentWorker] = []

    async def _start(
        provider: object, worker_id: str = "test-host:serve", tools: object = None, **options: object
    ) -> AgentWorker:
        set_provider(provider)  # what `ready` reports, as configured for the whole process
        worker = AgentWorker(worker_id, provider=provider, tools=tools, **options)
        await worker.start()
        workers.append(worker)
        return worker

    yield _start
    for worker in workers:
        await worker.stop(timeout=5)
    set_provider(None)
