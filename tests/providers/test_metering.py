"""One ``ProviderCall`` per metered stream: timings, usage, outcome, scope (issue 17)."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from conversations.usage.accounting import account
from providers.chunks import Done, ProviderStateChunk, TextDelta, UsageChunk
from providers.config import ProviderConfig
from providers.errors import RateLimitedError
from providers.messages import Message, Usage
from providers.metering import (
    CallScope,
    MeteredProvider,
    ProviderCall,
    add_observer,
    call_scope,
    remove_observer,
)
from providers.presets import ModelPreset
from providers.testing import ScriptedProvider, script_text
from providers.types import ProviderRequest


@pytest.fixture
def calls():
    seen: list[ProviderCall] = []
    add_observer(seen.append)
    yield seen
    remove_observer(seen.append)


def request(text: str = "hello") -> ProviderRequest:
    return ProviderRequest(messages=[Message.user(text)])


async def drain(provider, req=None) -> list:
    return [chunk async for chunk in provider.stream(req or request())]


async def test_a_successful_call_reports_usage_ttft_and_its_scope(calls):
    provider = MeteredProvider(ScriptedProvider([script_text("hi there", usage=(120, 7))]), "fast")
    with call_scope(CallScope("turn", "web:c:d", "t-1", 3, "web")):
        chunks = await drain(provider)
    assert isinstance(chunks[-1], Done)
    (call,) = calls
    assert (call.preset, call.provider, call.model, call.outcome) == (
        "fast",
        "scripted",
        "scripted-model",
        "ok",
    )
    assert call.scope == CallScope("turn", "web:c:d", "t-1", 3, "web")
    assert call.usage == Usage(120, 7)
    assert call.ttft_s is not None and 0 <= call.ttft_s <= call.latency_s
    assert call.output_text == ""  # the provider's usage counts: nothing kept to estimate


async def test_a_failed_call_is_recorded_with_its_error_and_the_error_goes_on(calls):
    error = RateLimitedError("slow down", http_status=429, retry_after_s=2.0)
    provider = MeteredProvider(ScriptedProvider([[TextDelta("par"), error]]), "p")
    with pytest.raises(RateLimitedError):
        await drain(provider)
    (call,) = calls
    assert call.outcome == "error" and call.error is error
    assert call.usage is None and call.output_text == "par"
    assert call.scope == CallScope()  # no scope set: a default one


async def test_a_call_whose_reader_stops_is_recorded_closed(calls):
    provider = MeteredProvider(ScriptedProvider([script_text("one two three four")]), "p")
    stream = provider.stream(request())
    assert isinstance(await anext(stream), TextDelta)
    await stream.aclose()
    (call,) = calls
    assert call.outcome == "closed" and call.output_text == "one"


async def test_usage_and_state_chunks_are_not_the_first_token(calls):
    chunks = [UsageChunk(Usage(1, 0)), ProviderStateChunk({"provider": "x"}), Done("stop")]
    await drain(MeteredProvider(ScriptedProvider([chunks]), "p"))
    assert calls[0].ttft_s is None and calls[0].outcome == "ok"


async def test_scopes_nest_and_follow_tasks(calls):
    provider = MeteredProvider(ScriptedProvider([script_text("a"), script_text("b")]), "p")
    with call_scope(CallScope("turn", "d", "t", None, "web")):
        with call_scope(kind="compaction"):
            await drain(provider)
        await asyncio.ensure_future(drain(provider))  # a task copies the scope as it starts
    assert [c.scope.kind for c in calls] == ["compaction", "turn"]
    assert {c.scope.turn_id for c in calls} == {"t"}


async def test_an_observer_that_raises_is_skipped(calls, caplog):
    def broken(call):
        raise RuntimeError("observer bug")

    add_observer(broken)
    try:
        chunks = await drain(MeteredProvider(ScriptedProvider([script_text("fine")]), "p"))
    finally:
        remove_observer(broken)
    assert isinstance(chunks[-1], Done) and len(calls) == 1
    assert "observer" in caplog.text


async def test_accounting_uses_the_providers_usage_and_the_presets_prices(calls):
    usage = Usage(1_000_000, 200_000, cached_tokens=400_000, reasoning_tokens=50_000)
    chunks = [TextDelta("x"), UsageChunk(usage), Done("stop")]
    await drain(MeteredProvider(ScriptedProvider([chunks]), "p"))
    preset = ModelPreset(
        "p",
        ProviderConfig(),
        1000,
        price_input=Decimal("2.5"),
        price_output=Decimal("10"),
        price_cached=Decimal("1.25"),
    )
    billed = account(calls[0], preset)
    assert (billed.input_tokens, billed.output_tokens, billed.cached_tokens, billed.reasoning_tokens) == (
        1_000_000,
        200_000,
        400_000,
        50_000,
    )
    # (600 000 × 2.5 + 400 000 × 1.25 + 200 000 × 10) / 1e6 = 1.5 + 0.5 + 2
    assert billed.cost == Decimal("4") and not billed.estimated


async def test_a_call_without_usage_is_estimated_and_marked(calls):
    await drain(MeteredProvider(ScriptedProvider([script_text("an answer of some words", usage=None)]), "p"))
    billed = account(calls[0], None)
    assert billed.estimated and billed.input_tokens > 0 and billed.output_tokens > 0
    assert billed.cost == 0  # no preset: no prices


async def test_a_call_refused_before_any_output_used_nothing(calls):
    error = RateLimitedError("slow down", http_status=429)
    with pytest.raises(RateLimitedError):
        await drain(MeteredProvider(ScriptedProvider([error]), "p"))
    preset = ModelPreset("p", ProviderConfig(), 1000, price_input=Decimal(3), price_output=Decimal(15))
    billed = account(calls[0], preset)
    assert (billed.input_tokens, billed.output_tokens, billed.cost, billed.estimated) == (0, 0, 0, False)


async def test_a_call_cut_off_after_output_is_estimated(calls):
    error = RateLimitedError("gone", http_status=None)
    with pytest.raises(RateLimitedError):
        await drain(MeteredProvider(ScriptedProvider([[TextDelta("half an answer"), error]]), "p"))
    billed = account(calls[0], None)
    assert billed.estimated and billed.input_tokens > 0 and billed.output_tokens > 0
