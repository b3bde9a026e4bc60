"""Model presets in the real ``manage.py serve`` (one process, its own worker; issue 17).

The in-process tests start their worker themselves; this proves the command an operator runs:
``/model B`` sends the next turn to B's server, a rate-limited A with fallback B answers from B,
and each provider call is one usage row under the preset that made it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from providers.testing import LocalSSEServer, SSEResponse, openai_events, sse_body
from tests.e2e.serve_process import ServeProcess, manage
from tests.e2e.test_serve_process import WsClient, connect

pytestmark = [pytest.mark.e2e]


def answers(text: str) -> SSEResponse:
    return SSEResponse(pieces=[sse_body(openai_events(text))])


def rate_limited() -> SSEResponse:
    body = json.dumps({"error": {"message": "slow down", "type": "rate_limit_error"}}).encode()
    headers = {"content-type": "application/json", "retry-after": "1"}
    return SSEResponse(429, headers, [body], chunked=False)


def preset(name: str, url: str, extra: str = "") -> str:
    return (
        f'[models.{name}]\nprovider = "openai"\nbase_url = "{url}"\nmodel = "model-{name}"\n'
        f'api_key_env = "TEST_KEY_{name}"\nprice_input = 1\nprice_output = 2\n{extra}'
    )


async def usage_by_dialog(server: ServeProcess, token: str, calls: int) -> dict:
    """``GET /api/usage?group_by=dialog`` once ``calls`` rows are written (the writer batches)."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        for _ in range(100):
            items = (await http.get(server.url + "api/usage", params={"group_by": "dialog"})).json()["items"]
            if sum(item["calls"] for item in items) >= calls:
                return {item["key"]: item for item in items}
            await asyncio.sleep(0.1)
    raise AssertionError(f"fewer than {calls} usage rows: {items}")


async def turn(client: WsClient, text: str, msg_id: str) -> dict:
    await client.send({"type": "message", "content": text, "client_msg_id": msg_id})
    await client.until("turn_committed")
    return client.of_type("turn_updated")[-1]["turn"]


async def test_serve_runs_each_turn_on_its_dialogs_preset_and_falls_back(tmp_path: Path):
    manage(tmp_path, "migrate", "--noinput")
    token = manage(tmp_path, "createtoken", "alice").strip().splitlines()[-1]
    async with (
        LocalSSEServer([answers("from A"), rate_limited()]) as a,
        LocalSSEServer([answers("from B")], repeat_last=True) as b,
    ):
        config = tmp_path / "picobot.toml"
        config.write_text(
            'default_model = "A"\n'
            + preset("A", a.base_url, 'fallbacks = ["B"]\n')
            + preset("B", b.base_url),
            encoding="utf-8",
        )
        env = {
            "PICOBOT_CONFIG": str(config),
            "TEST_KEY_A": "key-a-0123456789",
            "TEST_KEY_B": "key-b-0123456789",
        }
        async with ServeProcess(tmp_path, env) as server, connect(server, token) as ws:
            client = WsClient(ws)
            await client.until("ready")
            first = await turn(client, "hello", "p-1")
            assert first["status"] == "completed" and (len(a.requests), len(b.requests)) == (1, 0)

            await client.send({"type": "message", "content": "/model B"})
            await client.until("notification")
            second = await turn(client, "and now?", "p-2")
            assert second["status"] == "completed" and (len(a.requests), len(b.requests)) == (1, 1)

            await client.send({"type": "message", "content": "/model A"})
            await client.until("notification")
            third = await turn(client, "once more", "p-3")  # A answers 429: B takes over at once
            assert third["status"] == "completed" and (len(a.requests), len(b.requests)) == (2, 2)
            notices = [f.get("content", "") for f in client.of_type("notification")]
            assert "Model A is rate-limited; answering with B." in notices

            (usage,) = (await usage_by_dialog(server, token, calls=4)).values()
            # One row a provider call: A, B, A (refused), B — never one a preset of the chain.
            assert usage["calls"] == 4
