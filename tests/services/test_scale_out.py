"""Scale-out mode for real: daphne + runagent processes sharing PostgreSQL and Redis (DESIGN §2).

Each test gets a fresh PostgreSQL database (created and dropped here) on the server named by
``PICOBOT_TEST_DATABASE_URL`` and uses the Redis named by ``PICOBOT_TEST_REDIS_URL``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import pytest
import websockets

from providers.testing import LocalSSEServer
from tests.conversations.streams import CALL_ID, answer_pieces, tool_call_pieces
from tests.e2e.serve_process import REPO, manage, openai_env, server_env
from tests.services.conftest import require_service

pytestmark = [pytest.mark.services, pytest.mark.e2e]


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database URL; dropped afterwards."""
    import psycopg

    base = require_service("PICOBOT_TEST_DATABASE_URL")
    name = f"picobot_test_{secrets.token_hex(4)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parsed = urlparse(base)
    yield urlunparse(parsed._replace(path=f"/{name}"))
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def wait_for_port(port: int, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            writer.close()
            return


async def spawn(env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            async with asyncio.timeout(20):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()


WEB_PROCESSES = {
    # The README's scale-out web process, and plain Daphne, which the README says also works.
    "serve --no-worker": [
        "manage.py",
        "serve",
        "--no-worker",
        "--no-migrate",
        "--host",
        "127.0.0.1",
        "--port",
    ],
    "daphne": ["-m", "daphne", "-b", "127.0.0.1", "picobot_site.asgi:application", "-p"],
}


@pytest.mark.parametrize("web_process", sorted(WEB_PROCESSES))
async def test_web_and_runagent_processes_share_postgres_and_redis(
    tmp_path: Path, postgres_url: str, web_process: str
):
    redis_url = require_service("PICOBOT_TEST_REDIS_URL")
    sse = {"content-type": "text/event-stream"}
    async with LocalSSEServer(
        [(200, sse, tool_call_pieces(), 0.02), (200, sse, answer_pieces(), 0.02)]
    ) as llm:
        extra = {
            "PICOBOT_DATABASE_URL": postgres_url,
            "PICOBOT_REDIS_URL": redis_url,
            **openai_env(llm),
        }
        manage(tmp_path, "migrate", "--noinput", extra_env=extra)
        token = manage(tmp_path, "createtoken", "carol", extra_env=extra).strip().splitlines()[-1]
        env = server_env(tmp_path, extra)
        port = free_port()
        web = await spawn(env, *WEB_PROCESSES[web_process], str(port))
        agent = await spawn(env, "manage.py", "runagent", "--worker-id", "scale-out-test")
        try:
            await wait_for_port(port)
            url = f"ws://127.0.0.1:{port}/ws/chat/"
            async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
                frames: list[dict] = []

                async def until(kind: str) -> dict:
                    async with asyncio.timeout(30):
                        while True:
                            frame = json.loads(await ws.recv())
                            frames.append(frame)
                            if frame["type"] == kind:
                                return frame

                ready = await until("ready")
                await ws.send(
                    json.dumps({"type": "message", "content": "What time is it?", "client_msg_id": "so-1"})
                )
                await until("ack")
                committed = await until("turn_committed")
                final = [f for f in frames if f["type"] == "turn_updated"][-1]["turn"]
                assert final["status"] == "completed" and final["session_id"] == ready["active_session_id"]
                assert [r["role"] for r in committed["messages"]] == [
                    "user",
                    "assistant",
                    "tool",
                    "assistant",
                ]
                assert committed["messages"][2]["tool_call_id"] == CALL_ID
        finally:
            await stop(agent)
            await stop(web)
