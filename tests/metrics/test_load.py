"""Must show 4 (issue 17): ``/metrics`` scraped after a small load run shows the counters moving.

Three turns through the real worker and WebSocket consumer with a scripted provider on a priced
preset: one with a tool call, one whose provider fails, one calling a tool nobody registered.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from decimal import Decimal

import pytest
from django.test import AsyncClient

from conversations.agent.tool_registry import Tool, ToolRegistry
from picobot_site.log_format import JsonLogFormatter, TurnScopeFilter
from providers.chunks import UsageChunk
from providers.errors import OverloadedError
from providers.messages import Usage
from providers.testing import ScriptedProvider, script_text, script_tool_call
from tests.conversations.conftest import make_token
from tests.metrics.conftest import METRICS_TOKEN
from tests.metrics.scrape import Samples, moved, parse, value

pytestmark = [pytest.mark.django_db(transaction=True)]


async def clock(arguments: dict) -> str:
    return "12:00 UTC"


async def scrape() -> Samples:
    answer = await AsyncClient().get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert answer.status_code == 200
    return parse(answer.content.decode())


@pytest.fixture
def json_log() -> io.StringIO:
    """What the root logger writes during the test, in the JSON format (PICOBOT_LOG_FORMAT=json)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonLogFormatter())
    handler.addFilter(TurnScopeFilter())
    logging.getLogger().addHandler(handler)
    yield out
    logging.getLogger().removeHandler(handler)


async def test_a_small_load_moves_the_counters_it_should(
    connect, start_worker, metrics_on, priced_preset, json_log
):
    provider = ScriptedProvider(
        [
            script_tool_call("call_c1", "clock", {}),  # turn 1: a tool call, then the answer
            script_text("It is noon."),
            [UsageChunk(Usage(7, 0)), OverloadedError("upstream overloaded", http_status=503)],  # turn 2
            script_tool_call("call_t1", "teleport", {"to": "mars"}),  # turn 3: an unknown tool
            script_text("Cannot do that."),
        ]
    )
    before = await scrape()
    await start_worker(provider, tools=ToolRegistry([Tool("clock", "the time", {"type": "object"}, clock)]))
    client = await connect(await make_token())
    await client.until("ready")
    assert value(await scrape(), "picobot_websockets_open") == value(before, "picobot_websockets_open") + 1
    outcomes = []
    for n, text in enumerate(["What time is it?", "And now?", "Take me to Mars"]):
        await client.send({"type": "message", "content": text, "client_msg_id": f"load-{n}"})
        committed = await client.until("turn_committed")
        outcomes.append(client.of_type("turn_updated")[-1]["turn"]["status"])
    assert outcomes == ["completed", "failed", "completed"]
    await client.close()
    after = await scrape()

    assert moved(before, after, "picobot_turns_total", outcome="completed") == 2
    assert moved(before, after, "picobot_turns_total", outcome="failed") == 1
    assert moved(before, after, "picobot_turns_total", outcome="cancelled") == 0
    call = {"preset": "house", "kind": "turn"}
    assert moved(before, after, "picobot_provider_calls_total", **call, outcome="ok") == 4
    assert moved(before, after, "picobot_provider_calls_total", **call, outcome="error") == 1
    assert moved(before, after, "picobot_provider_latency_seconds_count", preset="house") == 5
    assert (
        moved(before, after, "picobot_provider_ttft_seconds_count", preset="house") == 4
    )  # the failure had no output
    # The provider's usage: 10 in / 5 out per answer, 7 in for the failed call.
    assert moved(before, after, "picobot_provider_tokens_total", **call, type="input") == 47
    assert moved(before, after, "picobot_provider_tokens_total", **call, type="output") == 20
    assert moved(before, after, "picobot_provider_tokens_total", **call, type="cached") == 0
    cost = Decimal(47 * 2 + 20 * 8) / 1_000_000
    assert moved(before, after, "picobot_provider_cost_total", **call) == pytest.approx(float(cost))
    assert moved(before, after, "picobot_tool_calls_total", tool="clock") == 1
    assert moved(before, after, "picobot_tool_errors_total", tool="clock") == 0
    assert moved(before, after, "picobot_tool_calls_total", tool="unknown") == 1  # not "teleport"
    assert moved(before, after, "picobot_tool_errors_total", tool="unknown") == 1
    assert ("picobot_tool_calls_total", frozenset({("tool", "teleport")})) not in after
    assert value(after, "picobot_websockets_open") == value(before, "picobot_websockets_open")
    # The worker samples its loop lag every period (0.05 s) while it runs: a run may end before one is taken,
    # so wait for one rather than race it.
    for _ in range(100):
        if moved(before, after, "picobot_event_loop_lag_seconds_count") > 0:
            break
        await asyncio.sleep(0.1)
        after = await scrape()
    assert moved(before, after, "picobot_event_loop_lag_seconds_count") > 0

    # The failed turn's log lines name its dialog and turn (PICOBOT_LOG_FORMAT=json).
    failed = [
        line
        for line in map(json.loads, json_log.getvalue().splitlines())
        if line["level"] in ("WARNING", "ERROR") and "overloaded" in line["message"]
    ]
    assert failed, json_log.getvalue()
    assert all(line["dialog_id"] == committed["session_id"] and line["turn_id"] for line in failed)
