"""Pre-request / post-request / on-error hooks (seed 002 §3a; providers/hooks.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import httpx2
import pytest

from providers.chunks import Done, TextDelta
from providers.config import ProviderConfig
from providers.errors import OverloadedError, ProviderError, RequestBlockedError, StreamTruncatedError
from providers.factory import build_provider
from providers.hooks import Block, HookContext, ProviderHooks
from providers.messages import Message
from providers.openai_compat import OpenAICompatProvider
from providers.testing import (
    LocalSSEServer,
    ScriptedProvider,
    SSEResponse,
    openai_events,
    script_text,
    sse_body,
)
from providers.types import AssistantResponse, ProviderRequest

REQUEST = ProviderRequest([Message.user("hi")])
SECRET = "sk-super-secret-key-0123456789"


def http_provider(*responses: httpx2.Response, **kwargs) -> tuple[OpenAICompatProvider, list[httpx2.Request]]:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return responses[min(len(seen), len(responses)) - 1]

    kwargs.setdefault("retry_backoff", 0.001)
    provider = OpenAICompatProvider(
        "http://x/v1", SECRET, "m", transport=httpx2.MockTransport(handler), **kwargs
    )
    return provider, seen


def sse(body: bytes) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)


class Recorder:
    """Registers one hook of each kind and records what they saw."""

    def __init__(self, hooks: ProviderHooks, *, block: str | None = None) -> None:
        self.events: list[tuple[str, object]] = []
        self.contexts: list[HookContext] = []
        self.block = block
        hooks.pre_request(self.pre)
        hooks.post_request(self.post)
        hooks.on_error(self.error)

    async def pre(self, ctx: HookContext) -> Block | None:
        self.contexts.append(ctx)
        self.events.append(("pre", ctx.request))
        return Block(self.block) if self.block else None

    async def post(self, ctx: HookContext, response: AssistantResponse) -> None:
        self.contexts.append(ctx)
        self.events.append(("post", response))

    async def error(self, ctx: HookContext, error: ProviderError) -> None:
        self.contexts.append(ctx)
        self.events.append(("error", error))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]


async def test_a_blocking_pre_request_hook_stops_the_call_before_any_http_request() -> None:
    provider, seen = http_provider(sse(sse_body(openai_events("never"))), max_retries=2)
    recorder = Recorder(provider.hooks, block="messages about the moon are not allowed")
    with pytest.raises(RequestBlockedError) as info:
        await provider.collect(REQUEST)
    error = info.value
    assert seen == []
    assert (error.kind, error.retryable, error.message) == (
        "blocked",
        False,
        "messages about the moon are not allowed",
    )
    assert error.hook.endswith("Recorder.pre") and error.http_status is None
    assert recorder.kinds() == ["pre", "error"] and recorder.events[1][1] is error


async def test_a_pre_request_hook_sees_the_neutral_request_and_may_raise_the_block_itself() -> None:
    provider = ScriptedProvider([script_text("unused")])

    async def policy(ctx: HookContext) -> None:
        assert ctx.request is REQUEST and (ctx.provider, ctx.model) == ("scripted", "scripted-model")
        raise RequestBlockedError("quota for today is used up", hook="quota")

    provider.hooks.pre_request(policy)
    with pytest.raises(RequestBlockedError, match="quota for today is used up"):
        await provider.collect(REQUEST)
    assert provider.requests == []


@pytest.mark.parametrize("failure", ["raises", "hangs"])
async def test_a_broken_or_slow_pre_request_hook_fails_closed(failure: str) -> None:
    provider = ScriptedProvider([script_text("unused")])

    async def broken(ctx: HookContext) -> None:
        if failure == "raises":
            raise RuntimeError("policy service down")
        await asyncio.sleep(10)

    provider.hooks.pre_request(broken, name="policy", timeout=0.05)
    with pytest.raises(RequestBlockedError) as info:
        await provider.collect(REQUEST)
    assert info.value.hook == "policy" and "'policy'" in info.value.message
    assert provider.requests == []


async def test_pre_request_hooks_run_in_order_and_the_first_block_wins() -> None:
    provider = ScriptedProvider([script_text("unused")])
    calls: list[str] = []

    def hook(name: str, verdict: Block | None):
        async def run(ctx: HookContext) -> Block | None:
            calls.append(name)
            return verdict

        return run

    provider.hooks.pre_request(hook("a", None), name="a")
    provider.hooks.pre_request(hook("b", Block("no")), name="b")
    provider.hooks.pre_request(hook("c", None), name="c")
    with pytest.raises(RequestBlockedError) as info:
        await provider.collect(REQUEST)
    assert calls == ["a", "b"] and info.value.hook == "b"


async def test_post_request_sees_the_whole_response_before_the_caller_gets_done() -> None:
    body = sse_body(
        openai_events("It is noon.", reasoning="check the clock", tool_calls=[("call_1", "clock", "{}")])
    )
    provider, _ = http_provider(sse(body))
    recorder = Recorder(provider.hooks)
    seen_before_done: list[str] = []
    async for chunk in provider.stream(REQUEST):
        if isinstance(chunk, Done):
            seen_before_done = recorder.kinds()
    assert seen_before_done == ["pre", "post"]
    response = recorder.events[1][1]
    assert isinstance(response, AssistantResponse)
    assert (response.text, response.reasoning, response.finish_reason) == (
        "It is noon.",
        "check the clock",
        "tool_calls",
    )
    assert [(c.id, c.name, c.arguments_json) for c in response.tool_calls] == [("call_1", "clock", "{}")]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (10, 5)
    assert response.error is None


async def test_on_error_sees_the_error_the_caller_gets_once_after_the_retries() -> None:
    failing = httpx2.Response(503, json={"error": {"message": "busy"}})
    provider, seen = http_provider(failing, max_retries=2)
    recorder = Recorder(provider.hooks)
    with pytest.raises(OverloadedError) as info:
        await provider.collect(REQUEST)
    assert len(seen) == 3
    assert recorder.kinds() == ["pre", "error"] and recorder.events[1][1] is info.value


async def test_on_error_runs_after_the_partial_chunks_of_a_failed_stream() -> None:
    partial = sse_body(openai_events("half an answer", done=False, usage=None)[:-1])
    provider, _ = http_provider(sse(partial), max_retries=0)
    recorder = Recorder(provider.hooks)
    text: list[str] = []
    with pytest.raises(StreamTruncatedError):
        async for chunk in provider.stream(REQUEST):
            if isinstance(chunk, TextDelta):
                text.append(chunk.text)
                assert recorder.kinds() == ["pre"]
    assert "".join(text) == "half an answer"
    assert recorder.kinds() == ["pre", "error"]


async def test_observer_hooks_that_fail_or_hang_never_change_the_outcome(caplog) -> None:
    provider = ScriptedProvider([script_text("fine"), OverloadedError("busy", http_status=503)])

    async def crash(*args: object) -> None:
        raise RuntimeError("metrics backend down")

    async def hang(*args: object) -> None:
        await asyncio.sleep(10)

    provider.hooks.post_request(crash)
    provider.hooks.post_request(hang, timeout=0.05)
    provider.hooks.on_error(crash)
    provider.hooks.on_error(hang, timeout=0.05)
    assert (await provider.collect(REQUEST)).text == "fine"
    with pytest.raises(OverloadedError):
        await provider.collect(REQUEST)
    assert "metrics backend down" in caplog.text and "overran" in caplog.text


async def test_hooks_never_see_the_api_key() -> None:
    provider, seen = http_provider(
        sse(sse_body(openai_events("ok"))), httpx2.Response(401, json={}), max_retries=0
    )
    recorder = Recorder(provider.hooks)
    await provider.collect(REQUEST)
    with pytest.raises(ProviderError):
        await provider.collect(REQUEST)
    assert seen[0].headers["authorization"] == f"Bearer {SECRET}"  # the key is really in use
    assert len(recorder.contexts) == 4
    for ctx in recorder.contexts:
        assert set(HookContext.__slots__) == {"provider", "model", "request", "call_id"}
        assert SECRET not in repr(ctx) and "x/v1" not in repr(ctx)
    for _, value in recorder.events:
        assert SECRET not in repr(value) and SECRET not in str(value)
    first, second = recorder.contexts[0].call_id, recorder.contexts[2].call_id
    assert recorder.contexts[1].call_id == first and first != second


async def test_closing_the_stream_early_runs_no_post_or_error_hook_and_closes_the_inner_stream() -> None:
    body = sse_body(openai_events("one two three four"))
    async with LocalSSEServer([SSEResponse(pieces=[body[:200], body[200:]], delay=0.05)]) as server:
        provider = OpenAICompatProvider(server.base_url, "k", "m", max_retries=0)
        recorder = Recorder(provider.hooks)
        stream = provider.stream(REQUEST)
        assert isinstance(await anext(stream), TextDelta)
        await stream.aclose()
        await asyncio.wait_for(provider.aclose(), 1.0)
    assert recorder.kinds() == ["pre"]


async def test_over_real_http_a_blocked_request_never_reaches_the_server() -> None:
    async with LocalSSEServer([SSEResponse(pieces=[sse_body(openai_events("allowed"))])]) as server:
        provider = OpenAICompatProvider(server.base_url, "k", "m", max_retries=0)

        async def only_short(ctx: HookContext) -> Block | None:
            return Block("message too long") if len(ctx.request.messages[-1].text) > 10 else None

        provider.hooks.pre_request(only_short)
        with pytest.raises(RequestBlockedError):
            await provider.collect(ProviderRequest([Message.user("x" * 11)]))
        assert server.recorded == []
        assert (await provider.collect(REQUEST)).text == "allowed"
        await provider.aclose()
    assert len(server.recorded) == 1


def test_a_provider_without_hooks_streams_its_own_generator_directly() -> None:
    provider = ScriptedProvider([script_text("x")])
    stream = provider.stream(REQUEST)
    assert stream.ag_code is ScriptedProvider._stream.__code__  # no wrapper on the hot path
    assert "_hooks" not in provider.__dict__
    assert not provider.hooks and "_hooks" in provider.__dict__


def install_audit(hooks: ProviderHooks) -> None:
    """An installer for the factory test (``LLM_HOOKS``)."""

    async def refuse(ctx: HookContext) -> Block:
        return Block("audit mode: no calls")

    hooks.pre_request(refuse, name="audit")


async def test_the_factory_installs_hooks_named_in_llm_hooks() -> None:
    config = ProviderConfig(
        provider="openai",
        model="m",
        base_url="http://127.0.0.1:9/v1",
        hooks=["tests.providers.test_hooks.install_audit"],
    )
    provider = build_provider(config)
    with pytest.raises(RequestBlockedError, match="audit mode"):
        await provider.collect(REQUEST)
    await provider.aclose()
    with pytest.raises(ValueError, match="PICOBOT_LLM_HOOKS"):
        build_provider(replace(config, hooks=["tests.providers.test_hooks.no_such_installer"]))
    with pytest.raises(ValueError, match="PICOBOT_LLM_HOOKS"):
        build_provider(replace(config, hooks=["not_a_module_anywhere.install"]))


def install_that_fails(hooks: ProviderHooks) -> None:
    raise RuntimeError("boom in install")


def install_without_arguments() -> None:
    pass


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("tests.providers.test_hooks.install_that_fails", "failed: RuntimeError: boom in install"),
        ("tests.providers.test_hooks.install_without_arguments", "failed: TypeError"),
        ("tests.providers._hook_module_that_raises.install", "cannot import"),
    ],
)
def test_a_hook_installer_that_fails_names_the_setting(path, said) -> None:
    config = ProviderConfig(provider="openai", model="m", base_url="http://127.0.0.1:9/v1", hooks=(path,))
    with pytest.raises(ValueError, match="PICOBOT_LLM_HOOKS") as caught:
        build_provider(config)
    assert said in str(caught.value)


def install_that_exits(hooks: ProviderHooks) -> None:
    raise SystemExit(3)


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("tests.providers.test_hooks.install_that_exits", "failed: SystemExit"),
        ("install", "no module.function path"),
    ],
)
def test_a_hook_that_exits_or_a_bare_name_is_a_configuration_error(path, said) -> None:
    config = ProviderConfig(provider="openai", model="m", base_url="http://127.0.0.1:9/v1", hooks=(path,))
    with pytest.raises(ValueError, match="PICOBOT_LLM_HOOKS") as caught:
        build_provider(config)
    assert said in str(caught.value)
