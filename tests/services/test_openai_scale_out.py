"""The OpenAI-compatible endpoint in the scale-out mode (issue 18, DESIGN §2): ``serve
--no-worker`` answers ``/v1`` while a ``runagent`` process runs the turns, over PostgreSQL and
Redis — the turn's snapshots reach the web process through the layer, and a client that leaves
stops a turn another process runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import openai
import pytest

from providers.testing import LocalSSEServer
from tests.e2e.serve_process import manage, openai_env, server_env
from tests.e2e.test_openai_endpoint import upstream
from tests.services.conftest import require_service
from tests.services.test_scale_out import WEB_PROCESSES, free_port, spawn, stop, wait_for_port
from tests.services.test_scale_out import postgres_url as postgres_url  # the fixture

pytestmark = [pytest.mark.services, pytest.mark.e2e]


async def test_v1_streams_a_runagent_turn_and_a_leaving_client_stops_it(tmp_path: Path, postgres_url: str):
    redis_url = require_service("PICOBOT_TEST_REDIS_URL")
    async with LocalSSEServer(handler=upstream) as llm:
        extra = {
            "PICOBOT_DATABASE_URL": postgres_url,
            "PICOBOT_REDIS_URL": redis_url,
            **openai_env(llm),
        }
        manage(tmp_path, "migrate", "--noinput", extra_env=extra)
        token = manage(tmp_path, "createtoken", "dora", extra_env=extra).strip().splitlines()[-1]
        env = server_env(tmp_path, extra)
        port = free_port()
        web = await spawn(env, *WEB_PROCESSES["serve --no-worker"], str(port))
        agent = await spawn(env, "manage.py", "runagent", "--worker-id", "openai-scale-out")
        try:
            await wait_for_port(port)
            base = f"http://127.0.0.1:{port}"
            client = openai.AsyncOpenAI(base_url=base + "/v1", api_key=token, max_retries=0)
            stream = await client.chat.completions.create(
                model="default", messages=[{"role": "user", "content": "What time?"}], stream=True
            )
            deltas = [c.choices[0].delta for c in [c async for c in stream] if c.choices]
            assert "".join(d.content or "" for d in deltas) == "It is noon by the tool."
            assert "Ask the clock." in "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)

            async with await client.chat.completions.create(
                model="default",
                messages=[{"role": "user", "content": "hold on"}],
                stream=True,
                extra_headers={"X-PicoBot-Dialog": "held"},
            ) as held:
                async for chunk in held:
                    if chunk.choices and getattr(chunk.choices[0].delta, "reasoning_content", None):
                        break
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
                items = (await http.get(base + "/api/dialogs")).json()["items"]
                (dialog,) = [i for i in items if i["title"] == "held"]
                for _ in range(150):
                    page = await http.get(base + f"/api/dialogs/{dialog['session_id']}/messages")
                    rows = page.json()["messages"]
                    if rows and rows[-1]["role"] == "assistant":
                        break
                    await asyncio.sleep(0.1)
            assert rows[-1]["completion_status"] == "cancelled"
            assert rows[0]["outcome"]["status"] == "cancelled"
            await client.close()
        finally:
            await stop(agent)
            await stop(web)
