"""Bounded retries: only for retryable errors, only before any output, honouring retry-after."""

from __future__ import annotations

import asyncio
import time

import httpx2
import pytest

from providers.chunks import TextDelta
from providers.errors import (
    AuthenticationError,
    InBandError,
    OverloadedError,
    RateLimitedError,
    StreamTruncatedError,
)
from providers.messages import Message
from providers.openai_compat import OpenAICompatProvider
from providers.testing import openai_events, sse_body
from providers.types import ProviderRequest

REQUEST = ProviderRequest([Message.user("hi")])
OK = sse_body(openai_events("fine"))


def scripted(*responses: httpx2.Response, **kwargs) -> tuple[OpenAICompatProvider, list[httpx2.Request]]:
    """A provider whose transport answers with ``responses`` in order."""
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return responses[min(len(seen), len(responses)) - 1]

    kwargs.setdefault("retry_backoff", 0.001)
    return OpenAICompatProvider(
        "http://x/v1", "k", "m", transport=httpx2.MockTransport(handler), **kwargs
    ), seen


def sse(body: bytes) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def status(code: int, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(code, headers=headers or {}, json={"error": {"message": f"status {code}"}})


async def test_retryable_errors_before_output_are_retried_until_success() -> None:
    provider, seen = scripted(status(503), status(429), sse(OK), max_retries=2)
    assert (await provider.collect(REQUEST)).text == "fine"
    assert len(seen) == 3


async def test_retries_are_bounded() -> None:
    provider, seen = scripted(status(503), max_retries=2)
    with pytest.raises(OverloadedError):
        await provider.collect(REQUEST)
    assert len(seen) == 3


async def test_non_retryable_errors_are_raised_at_once() -> None:
    provider, seen = scripted(status(401), sse(OK), max_retries=2)
    with pytest.raises(AuthenticationError):
        await provider.collect(REQUEST)
    assert len(seen) == 1


async def test_retry_after_is_honoured() -> None:
    provider, seen = scripted(status(429, {"retry-after": "0.2"}), sse(OK), max_retries=1, retry_backoff=0.0)
    started = time.monotonic()
    assert (await provider.collect(REQUEST)).text == "fine"
    assert time.monotonic() - started >= 0.2 and len(seen) == 2


async def test_retry_after_is_clamped_by_max_retry_delay() -> None:
    provider, _ = scripted(status(429, {"retry-after": "30"}), sse(OK), max_retries=1, max_retry_delay=0.05)
    started = time.monotonic()
    assert (await provider.collect(REQUEST)).text == "fine"
    assert time.monotonic() - started < 5


async def test_a_failure_after_output_is_not_retried() -> None:
    partial = sse_body(openai_events("some words", done=False, usage=None)[:-1])  # no finish, no [DONE]
    provider, seen = scripted(sse(partial), sse(OK), max_retries=2)
    chunks = []
    with pytest.raises(StreamTruncatedError):
        async for chunk in provider.stream(REQUEST):
            chunks.append(chunk)
    assert len(seen) == 1
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "some words"


async def test_a_truncated_stream_with_no_output_is_retried() -> None:
    provider, seen = scripted(sse(b": keep-alive\n\n"), sse(OK), max_retries=1)
    assert (await provider.collect(REQUEST)).text == "fine"
    assert len(seen) == 2


async def test_an_in_band_overload_before_output_is_retried_but_a_bad_request_is_not() -> None:
    overloaded = sse_body(
        [
            {
                "choices": [],
                "usage": {"prompt_tokens": 9, "completion_tokens": 0},
                "error": {"code": 503, "message": "busy"},
            }
        ]
    )
    provider, seen = scripted(sse(overloaded), sse(OK), max_retries=1)
    result = await provider.collect(REQUEST)
    assert (result.text, result.usage.input_tokens, len(seen)) == ("fine", 10, 2)  # usage of the retry wins
    refused = sse_body([{"error": {"code": "invalid_prompt", "message": "no"}}])
    provider, seen = scripted(sse(refused), sse(OK), max_retries=1)
    with pytest.raises(InBandError):
        await provider.collect(REQUEST)
    assert len(seen) == 1


async def test_max_retries_zero_means_one_attempt() -> None:
    provider, seen = scripted(status(429), sse(OK), max_retries=0)
    with pytest.raises(RateLimitedError):
        await provider.collect(REQUEST)
    assert len(seen) == 1


async def test_stopping_early_closes_the_response_at_once() -> None:
    closed = asyncio.Event()
    body = sse_body(openai_events("one two three"))

    async def slow_body():
        try:
            yield body[:150]
            await asyncio.sleep(10)
            yield body[150:]
        finally:
            closed.set()

    provider, _ = scripted(
        httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=slow_body())
    )
    stream = provider.stream(REQUEST)
    assert isinstance(await anext(stream), TextDelta)
    await stream.aclose()
    assert closed.is_set()
    await provider.aclose()
