"""Each metric moves where it is observed, by the amounts observed (issue 17 "Metrics")."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from channels.db import database_sync_to_async
from prometheus_client import REGISTRY

from conversations.runtime.call_metrics import observe_call
from conversations.usage.accounting import account
from delivery.failures import record_delivery_failure
from delivery.load import LoopLagGauge
from picobot_site.metrics import instruments
from providers.errors import RateLimitedError
from providers.messages import Message, Usage
from providers.metering import CallScope, ProviderCall
from providers.openai_compat import OpenAICompatProvider
from providers.testing import ScriptedProvider, openai_events, sse_body
from providers.types import ProviderRequest
from tests.conversations.runtime.test_restart_notices import leave_a_started_turn, until_interrupted

REQUEST = ProviderRequest([Message.user("What is the weather like in Lisbon today?")])


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def a_call(
    usage: Usage | None, *, kind: str = "title", outcome: str = "ok", output_text: str = ""
) -> ProviderCall:
    return ProviderCall(
        preset="house",
        provider="openai",
        model="house-1",
        scope=CallScope(kind, "cli_chat:1:d", "t", 1, "cli_chat"),
        started_at=0.0,
        latency_s=1.5,
        ttft_s=0.25 if outcome == "ok" else None,
        usage=usage,
        outcome=outcome,
        error=None,
        request=REQUEST,
        output_text=output_text,
    )


def test_a_call_counts_the_providers_tokens_by_type_and_their_cost(priced_preset):
    labels = {"preset": "house", "kind": "title"}
    before = {
        t: sample("picobot_provider_tokens_total", **labels, type=t)
        for t in ("input", "output", "cached", "reasoning")
    }
    cost_before = sample("picobot_provider_cost_total", **labels)
    ttft_before = sample("picobot_provider_ttft_seconds_sum", preset="house")

    observe_call(a_call(Usage(1000, 400, cached_tokens=600, reasoning_tokens=150)))

    moved = {t: sample("picobot_provider_tokens_total", **labels, type=t) - v for t, v in before.items()}
    assert moved == {"input": 1000, "output": 400, "cached": 600, "reasoning": 150}
    # ((1000 − 600) × 2 + 600 × 1 + 400 × 8) / 1e6 (issue 17 "Public surface")
    assert sample("picobot_provider_cost_total", **labels) - cost_before == pytest.approx(0.0046)
    assert sample("picobot_provider_ttft_seconds_sum", preset="house") - ttft_before == pytest.approx(0.25)


def test_a_call_without_usage_counts_the_same_estimate_as_its_usage_row(priced_preset):
    call = a_call(None, kind="compaction", outcome="closed", output_text="A summary of the dialog so far.")
    estimated = account(call, None)
    labels = {"preset": "house", "kind": "compaction"}
    before = (
        sample("picobot_provider_tokens_total", **labels, type="input"),
        sample("picobot_provider_tokens_total", **labels, type="output"),
    )
    closed = sample("picobot_provider_calls_total", **labels, outcome="closed")
    observe_call(call)
    assert estimated.input_tokens > 0 and estimated.output_tokens > 0
    assert (
        sample("picobot_provider_tokens_total", **labels, type="input") - before[0] == estimated.input_tokens
    )
    assert (
        sample("picobot_provider_tokens_total", **labels, type="output") - before[1]
        == estimated.output_tokens
    )
    assert sample("picobot_provider_calls_total", **labels, outcome="closed") - closed == 1


async def test_a_transport_retry_counts_by_provider_and_error_kind():
    answers = iter(
        [
            httpx2.Response(429, headers={"retry-after": "0"}, json={"error": {"message": "slow down"}}),
            httpx2.Response(
                200, headers={"content-type": "text/event-stream"}, content=sse_body(openai_events("ok"))
            ),
        ]
    )
    provider = OpenAICompatProvider(
        "http://x/v1", "k", "m", transport=httpx2.MockTransport(lambda request: next(answers)), max_retries=1
    )
    before = sample("picobot_provider_retries_total", provider="openai", error="rate_limited")
    assert (await provider.collect(REQUEST)).text == "ok"
    assert sample("picobot_provider_retries_total", provider="openai", error="rate_limited") - before == 1
    assert RateLimitedError.kind == "rate_limited"


def test_record_fallback_counts_both_presets_and_the_kind():
    labels = {"from_preset": "house", "to_preset": "spare", "kind": "overloaded"}
    before = sample("picobot_fallbacks_total", **labels)
    instruments.record_fallback("house", "spare", "overloaded")
    assert sample("picobot_fallbacks_total", **labels) - before == 1


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (lambda: instruments.record_turn("done"), "unknown turn outcome 'done'"),
        (lambda: instruments.record_delivery_failure("cli_chat", "send"), "unknown delivery stage 'send'"),
        (
            lambda: instruments.record_provider_call(
                "house", "turn", "fine", latency_s=1, ttft_s=None, tokens={}, cost=0
            ),
            "unknown call outcome 'fine'",
        ),
    ],
)
def test_a_value_outside_its_set_is_refused_clearly(record, message):
    with pytest.raises(ValueError, match=message):
        record()


@pytest.mark.django_db
def test_a_recorded_delivery_failure_counts_by_channel_and_stage():
    before = sample("picobot_delivery_failures_total", channel="feishu", stage="finish")
    record_delivery_failure(
        channel="feishu",
        chat_id="oc_1",
        dialog_id="feishu:oc_1:d",
        turn_id=None,
        stage="finish",
        error="x",
        attempts=3,
    )
    assert sample("picobot_delivery_failures_total", channel="feishu", stage="finish") - before == 1


def test_the_loop_lag_gauge_hands_every_raw_sample_to_its_observer():
    seen: list[float] = []
    gauge = LoopLagGauge(on_sample=seen.append)
    gauge.sample(0.3)
    gauge.sample(-0.01)  # a timer cannot fire early: 0
    assert seen == [0.3, 0.0]


@pytest.mark.django_db(transaction=True)
async def test_a_takeover_counts_the_lease_and_the_interrupted_turn(start_worker):
    turn = await database_sync_to_async(leave_a_started_turn)()
    takeovers, interrupted = (
        sample("picobot_lease_takeovers_total"),
        sample("picobot_turns_total", outcome="interrupted"),
    )
    await start_worker(ScriptedProvider([]))
    await until_interrupted(turn["turn_id"])
    async with asyncio.timeout(10):  # the row is marked in the claim; the count follows its notice
        while True:
            if sample("picobot_turns_total", outcome="interrupted") != interrupted:
                break
            await asyncio.sleep(0.02)
    assert sample("picobot_lease_takeovers_total") - takeovers == 1
    assert sample("picobot_turns_total", outcome="interrupted") - interrupted == 1
