"""Must show 4, scale-out (issue 17): ``/metrics`` of a web process sums every process's numbers.

A ``serve --no-worker`` process and a ``runagent`` process share PostgreSQL, Redis and
``PICOBOT_METRICS_DIR``; the turns run in ``runagent``, the scrape goes to the web process. Needs
``PICOBOT_TEST_DATABASE_URL`` and ``PICOBOT_TEST_REDIS_URL`` (skips without them, like
``tests/services``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx2
import pytest
import websockets

from providers.testing import LocalSSEServer
from tests.conversations.streams import answer_pieces, tool_call_pieces
from tests.e2e.serve_process import manage, openai_env, server_env
from tests.metrics.scrape import Samples, parse, value
from tests.services.conftest import require_service
from tests.services.test_scale_out import free_port, spawn, stop, wait_for_port

pytestmark = [pytest.mark.services, pytest.mark.e2e]

TOKEN = "scale-out-scrape-token"


async def scrape(port: int) -> Samples:
    async with httpx2.AsyncClient(timeout=10) as client:
        answer = await client.get(
            f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
        )
    assert answer.status_code == 200, answer.text
    return parse(answer.text)


async def test_the_web_process_scrape_shows_the_turns_the_agent_process_ran(
    tmp_path: Path, postgres_url: str
):
    redis_url = require_service("PICOBOT_TEST_REDIS_URL")
    sse = {"content-type": "text/event-stream"}
    answers = [
        (200, sse, tool_call_pieces(), 0.01),
        (200, sse, answer_pieces(), 0.01),
        (200, sse, answer_pieces(), 0.01),
    ]
    async with LocalSSEServer(answers) as llm:
        extra = {
            "PICOBOT_DATABASE_URL": postgres_url,
            "PICOBOT_REDIS_URL": redis_url,
            **openai_env(llm),
            "PICOBOT_METRICS_DIR": str(tmp_path / "metrics"),
            "PICOBOT_METRICS_TOKEN": TOKEN,
        }
        manage(tmp_path, "migrate", "--noinput", extra_env=extra)
        token = manage(tmp_path, "createtoken", "erin", extra_env=extra).strip().splitlines()[-1]
        env = server_env(tmp_path, extra)
        port = free_port()
        web = await spawn(
            env,
            "manage.py",
            "serve",
            "--no-worker",
            "--no-migrate",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        )
        agent = await spawn(env, "manage.py", "runagent", "--worker-id", "metrics-agent")
        try:
            await wait_for_port(port)
            url = f"ws://127.0.0.1:{port}/ws/chat/"
            async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:

                async def until(kind: str) -> dict:
                    async with asyncio.timeout(30):
                        while True:
                            frame = json.loads(await ws.recv())
                            if frame["type"] == kind:
                                return frame

                await until("ready")
                for n, text in enumerate(["What time is it?", "Thanks"]):
                    await ws.send(json.dumps({"type": "message", "content": text, "client_msg_id": f"m-{n}"}))
                    await until("turn_committed")
                live = await scrape(port)
            await stop(agent)  # a normal exit: its counters stay, its live gauges go
            async with asyncio.timeout(10):
                while True:  # the web process notices the closed socket on its own schedule
                    after = await scrape(port)
                    if value(after, "picobot_websockets_open") == 0:
                        break
                    await asyncio.sleep(0.05)
        finally:
            await stop(agent)
            await stop(web)

    # Counted in runagent, scraped from serve: every process's numbers, summed.
    assert value(live, "picobot_turns_total", outcome="completed") == 2
    assert value(live, "picobot_provider_calls_total", preset="default", kind="turn", outcome="ok") == 3
    assert value(live, "picobot_provider_latency_seconds_count", preset="default") == 3
    assert value(live, "picobot_tool_calls_total", tool="current_time") == 1
    assert value(live, "picobot_provider_tokens_total", preset="default", kind="turn", type="input") > 0
    assert value(live, "picobot_event_loop_lag_seconds_count") > 0  # only the agent process samples it
    assert value(live, "picobot_websockets_open") == 1  # the web process's socket
    assert value(live, "picobot_inbox_depth", status="queued") == 0
    # The agent process is gone: what it counted stays.
    assert value(after, "picobot_turns_total", outcome="completed") == 2
    assert value(after, "picobot_tool_calls_total", tool="current_time") == 1
