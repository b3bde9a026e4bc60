"""The fallback chain's rules, with scripted providers (providers/fallback.py; issue 17)."""

from __future__ import annotations

import pytest

from providers.chunks import Done, ProviderStateChunk, TextDelta, UsageChunk
from providers.errors import (
    AuthenticationError,
    BadResponseError,
    ContextOverflowError,
    InBandError,
    OverloadedError,
    ProviderConnectionError,
    ProviderTimeoutError,
    RateLimitedError,
    RequestBlockedError,
    ResponseTooLongError,
    ServerError,
    StreamTruncatedError,
)
from providers.fallback import FallbackProvider, FallbackSwitch, falls_back
from providers.messages import Message, Usage
from providers.testing import ScriptedProvider, script_text, script_tool_call
from providers.types import ProviderRequest

REQUEST = ProviderRequest(messages=[Message.user("hi")])

FALLS_BACK = [
    RateLimitedError("slow down", http_status=429, retry_after_s=30),
    OverloadedError("overloaded", http_status=529),
    OverloadedError("unavailable", http_status=503),
    ServerError("boom", http_status=500),
    ProviderTimeoutError("no connection", phase="connect"),
    ProviderTimeoutError("no first byte", phase="first_byte"),
    ProviderConnectionError("refused"),
]
STAYS = [
    AuthenticationError("bad key", http_status=401),
    ContextOverflowError("too long", http_status=400),
    BadResponseError("bad request", http_status=400),
    RequestBlockedError("blocked", hook="h"),
    InBandError("in-band"),
    ResponseTooLongError("too long an answer", max_chars=10),
    StreamTruncatedError("cut"),
    ProviderTimeoutError("a gap between chunks", phase="idle"),
]


@pytest.mark.parametrize("error", FALLS_BACK, ids=lambda e: f"{type(e).__name__}-{e.message}")
def test_errors_that_mean_try_elsewhere_fall_back(error):
    assert falls_back(error)


@pytest.mark.parametrize("error", STAYS, ids=lambda e: f"{type(e).__name__}-{e.message}")
def test_other_errors_never_fall_back(error):
    assert not falls_back(error)


def test_the_decision_is_by_type_never_by_message_text():
    assert not falls_back(AuthenticationError("rate limit exceeded, server overloaded", http_status=401))
    assert falls_back(RateLimitedError("invalid api key"))


async def collect(provider: FallbackProvider) -> str:
    response = await provider.collect(REQUEST)
    return response.text


class Switches(list):
    async def __call__(self, switch: FallbackSwitch) -> None:
        self.append(switch)


@pytest.mark.parametrize("error", FALLS_BACK, ids=lambda e: f"{type(e).__name__}-{e.message}")
async def test_a_try_elsewhere_error_before_output_answers_from_the_next_preset(error):
    a = ScriptedProvider([error], name="openai", model="a-model")
    b = ScriptedProvider([script_text("from b")], name="anthropic", model="b-model")
    switches = Switches()
    chain = FallbackProvider([("A", a), ("B", b)], switches)
    assert await collect(chain) == "from b"
    assert [(s.failed, s.next, s.error) for s in switches] == [("A", "B", error)]
    assert (chain.answering, chain.name, chain.model) == ("B", "anthropic", "b-model")
    assert len(a.requests) == 1 and b.requests == [REQUEST]


@pytest.mark.parametrize("error", STAYS, ids=lambda e: f"{type(e).__name__}-{e.message}")
async def test_other_errors_fail_the_stream_without_trying_the_next_preset(error):
    b = ScriptedProvider([script_text("never")])
    switches = Switches()
    chain = FallbackProvider([("A", ScriptedProvider([error])), ("B", b)], switches)
    with pytest.raises(type(error)) as raised:
        await collect(chain)
    assert raised.value is error and not switches and not b.requests


async def test_output_already_streamed_is_never_followed_by_a_fallback():
    a = ScriptedProvider([[TextDelta("partial "), OverloadedError("gone", http_status=529)]])
    b = ScriptedProvider([script_text("never")])
    switches = Switches()
    seen = []
    with pytest.raises(OverloadedError):
        async for chunk in FallbackProvider([("A", a), ("B", b)], switches).stream(REQUEST):
            seen.append(chunk)
    assert seen == [TextDelta("partial ")] and not switches and not b.requests


async def test_a_started_tool_call_is_visible_output_too():
    started = script_tool_call("c1", "clock", {})[:2]
    a = ScriptedProvider([[*started, ServerError("boom", http_status=500)]])
    b = ScriptedProvider([script_text("never")])
    with pytest.raises(ServerError):
        await collect(FallbackProvider([("A", a), ("B", b)]))
    assert not b.requests


async def test_usage_and_replay_state_are_not_visible_output():
    a = ScriptedProvider(
        [[UsageChunk(Usage(3, 0)), ProviderStateChunk({"provider": "a"}), RateLimitedError("429")]]
    )
    b = ScriptedProvider([script_text("from b")])
    assert await collect(FallbackProvider([("A", a), ("B", b)])) == "from b"


async def test_an_exhausted_chain_raises_the_last_error_typed_naming_what_was_tried():
    chain = FallbackProvider(
        [
            ("A", ScriptedProvider([RateLimitedError("429", http_status=429)])),
            ("B", ScriptedProvider([OverloadedError("529", http_status=529, provider_message="Overloaded")])),
        ]
    )
    with pytest.raises(OverloadedError) as raised:
        await collect(chain)
    assert raised.value.provider_message == (
        "no model preset could answer (tried A (rate_limited), B (overloaded)): Overloaded"
    )


async def test_a_chain_of_three_moves_on_twice_and_stays_on_the_preset_that_answered():
    a = ScriptedProvider([ProviderConnectionError("refused")])
    b = ScriptedProvider([ServerError("500", http_status=500)])
    c = ScriptedProvider([script_text("one"), script_text("two")])
    switches = Switches()
    chain = FallbackProvider([("A", a), ("B", b), ("C", c)], switches)
    assert await collect(chain) == "one"
    assert [(s.failed, s.next) for s in switches] == [("A", "B"), ("B", "C")]
    # The turn's next request starts at C: no second notice, no second try of A and B.
    assert await collect(chain) == "two"
    assert len(switches) == 2 and len(a.requests) == len(b.requests) == 1


def test_the_notice_names_both_presets_and_why():
    switch = FallbackSwitch("fast", "backup", RateLimitedError("429"))
    assert switch.notice == "Model fast is rate-limited; answering with backup."
    assert FallbackSwitch("a", "b", OverloadedError("529")).reason == "is overloaded"
    assert (
        FallbackSwitch("a", "b", ProviderTimeoutError("t", phase="connect")).reason
        == "did not answer in time"
    )


def test_an_empty_chain_is_refused():
    with pytest.raises(ValueError, match="at least one preset"):
        FallbackProvider([])


async def test_a_chain_of_one_is_the_preset_alone():
    error = RateLimitedError("429")
    with pytest.raises(RateLimitedError) as raised:
        await collect(FallbackProvider([("A", ScriptedProvider([error]))]))
    assert raised.value.provider_message is None  # nothing was tried elsewhere: the error as it came


async def test_done_ends_the_stream_once():
    chain = FallbackProvider([("A", ScriptedProvider([script_text("x")])), ("B", ScriptedProvider([]))])
    chunks = [c async for c in chain.stream(REQUEST)]
    assert isinstance(chunks[-1], Done) and sum(isinstance(c, Done) for c in chunks) == 1
