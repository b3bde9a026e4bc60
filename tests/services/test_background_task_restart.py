"""A background task whose runagent process dies, on PostgreSQL + Redis (issue 18 "Must show" 4).

Web process + runagent A run a task whose sub-agent request hangs; A is killed (no clean-up of
its own). Two new runagent processes B and C race to sweep: the task ends ``interrupted`` once,
the chat gets one notice, and the sub-agent is never called again.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import websockets

from conversations.agent.background_tasks import SUB_AGENT_PROMPT
from providers.testing import (
    LocalSSEServer,
    RecordedRequest,
    SSEResponse,
    openai_events,
    split_events,
    sse_body,
)
from tests.e2e.serve_process import manage, openai_env, server_env
from tests.services.conftest import require_service
from tests.services.test_scale_out import free_port, postgres_url, spawn, stop, wait_for_port  # noqa: F401

pytestmark = [pytest.mark.services, pytest.mark.e2e]


def pieces(**events: object) -> list[bytes]:
    return split_events(sse_body(openai_events(**events)))


class LLM:
    """Routes the mock upstream's requests: sub-agent requests hang, the parent spawns a task."""

    def __init__(self) -> None:
        self.task_calls = 0
        self.task_called = asyncio.Event()

    def __call__(self, request: RecordedRequest) -> SSEResponse:
        messages = request.json()["messages"]
        if messages[0].get("content") == SUB_AGENT_PROMPT:
            self.task_calls += 1
            self.task_called.set()
            return SSEResponse(pieces=pieces(text="working on it"), stall_after=1)
        if any(m["role"] == "tool" for m in messages):
            return SSEResponse(pieces=pieces(text="I started a background task."))
        arguments = json.dumps({"prompt": "index the wiki"})
        return SSEResponse(pieces=pieces(tool_calls=[("call_spawn", "spawn_task", arguments)]))


async def test_a_killed_runagent_s_task_ends_interrupted_once_and_never_runs_again(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 - the fixture imported above
):
    redis_url = require_service("PICOBOT_TEST_REDIS_URL")
    llm = LLM()
    async with LocalSSEServer(handler=llm) as server:
        extra = {
            "PICOBOT_DATABASE_URL": postgres_url,
            "PICOBOT_REDIS_URL": redis_url,
            **openai_env(server),
            "PICOBOT_LEASE_SECONDS": "2",
            "PICOBOT_LEASE_RENEW_SECONDS": "0.5",
            "PICOBOT_INBOX_SCAN_SECONDS": "0.5",
        }
        manage(tmp_path, "migrate", "--noinput", extra_env=extra)
        token = manage(tmp_path, "createtoken", "carol", extra_env=extra).strip().splitlines()[-1]
        env = server_env(tmp_path, extra)
        port = free_port()
        web = await spawn(
            env, "-m", "daphne", "-b", "127.0.0.1", "picobot_site.asgi:application", "-p", str(port)
        )
        agents = [await spawn(env, "manage.py", "runagent", "--worker-id", "agent-a")]
        try:
            await wait_for_port(port)
            url = f"ws://127.0.0.1:{port}/ws/chat/"
            async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
                frames: list[dict] = []

                async def until(kind: str, test=lambda frame: True) -> dict:  # noqa: ANN001
                    async with asyncio.timeout(30):
                        while True:
                            frame = json.loads(await ws.recv())
                            frames.append(frame)
                            if frame["type"] == kind and test(frame):
                                return frame

                await until("ready")
                await ws.send(json.dumps({"type": "message", "content": "index it", "client_msg_id": "bt-1"}))
                committed = await until("turn_committed")
                assert committed["messages"][-1]["content"] == "I started a background task."
                await asyncio.wait_for(llm.task_called.wait(), timeout=30)

                agents[0].kill()  # dies without ending its task
                await agents[0].wait()
                for worker_id in ("agent-b", "agent-c"):
                    agents.append(await spawn(env, "manage.py", "runagent", "--worker-id", worker_id))

                notice = await until("notification", lambda f: "its server process stopped" in f["content"])
                task_id = notice["content"].split()[2]
                await ws.send(json.dumps({"type": "message", "content": "/tasks"}))
                listing = await until(
                    "notification", lambda f: f["content"].startswith("Your background tasks")
                )
                assert f"{task_id} · interrupted" in listing["content"]
                # B and C keep sweeping; a second end would be a second notice before this answer.
                await asyncio.sleep(2)
                await ws.send(json.dumps({"type": "message", "content": "/tasks"}))
                await until("notification", lambda f: f["content"].startswith("Your background tasks"))
                notices = [f for f in frames if "its server process stopped" in f.get("content", "")]
                assert len(notices) == 1
                assert llm.task_calls == 1
        finally:
            for agent in agents:
                await stop(agent)
            await stop(web)
