"""Integration: the providers against a real loopback HTTP server (LocalSSEServer).

The server sends chunked bodies whose chunks split events and UTF-8 sequences, so httpx2's
real connection, chunked decoding and keep-alive code runs under the parsers.
"""

from __future__ import annotations

import asyncio
import socket
import time

import httpx2
import pytest

from providers.errors import (
    ProviderConnectionError,
    ProviderTimeoutError,
    RateLimitedError,
    ServerError,
    StreamTruncatedError,
)
from providers.messages import Message
from providers.openai_compat import OpenAICompatProvider
from providers.testing import LocalSSEServer, SSEResponse, openai_events, split_every, sse_body
from providers.types import ProviderRequest
from tests.providers._cases import assert_matches, case_ids, load_case, make_provider, normalise, run_stream

REQUEST = ProviderRequest([Message.user("Hi")])


def _provider(server: LocalSSEServer, **kwargs) -> OpenAICompatProvider:
    kwargs.setdefault("max_retries", 0)
    return OpenAICompatProvider(server.base_url, "sk-test", "test-model", **kwargs)


@pytest.mark.parametrize("case_id", case_ids())
async def test_case_over_real_http_in_3_byte_chunks(case_id: str) -> None:
    case = load_case(case_id)
    response = SSEResponse(case.status, case.headers, split_every(case.body, 3))
    async with LocalSSEServer([response]) as server:
        result, _ = await run_stream(make_provider(case_id, base_url=server.base_url))
        assert_matches(normalise(result), case.expected, f"{case_id} (real HTTP)")
        assert len(server.requests) == 1 and server.requests[0]["stream"] is True


async def test_sc13_split_inside_multibyte_characters_over_real_http() -> None:
    case = load_case("SC-13")
    pieces = [case.body[:332], case.body[332:519], case.body[519:]]
    async with LocalSSEServer([SSEResponse(pieces=pieces, delay=0.01)]) as server:
        result, _ = await run_stream(make_provider("SC-13", base_url=server.base_url))
    assert result.text == "你好，世界 🌍"


async def test_server_serves_sequential_requests_on_one_kept_alive_connection() -> None:
    bodies = [sse_body(openai_events("first answer")), sse_body(openai_events("second answer"))]
    async with LocalSSEServer([SSEResponse(pieces=[b]) for b in bodies]) as server:
        provider = _provider(server)
        first = await provider.collect(REQUEST)
        second = await provider.collect(REQUEST)
        await provider.aclose()
    assert (first.text, second.text) == ("first answer", "second answer")
    assert [r.connection for r in server.recorded] == [1, 1]
    assert server.recorded[0].path == "/v1/chat/completions"
    assert server.recorded[0].headers["authorization"] == "Bearer sk-test"


async def test_exhausted_server_answers_500_naming_the_request() -> None:
    async with LocalSSEServer([SSEResponse(pieces=[sse_body(openai_events("only one"))])]) as server:
        provider = _provider(server)
        await provider.collect(REQUEST)
        with pytest.raises(ServerError, match="no scripted response left for request #2"):
            await provider.collect(REQUEST)
        await provider.aclose()
    assert server.errors == ["LocalSSEServer: no scripted response left for request #2"]


async def test_repeat_last_serves_the_last_response_again() -> None:
    async with LocalSSEServer(
        [SSEResponse(pieces=[sse_body(openai_events("again"))])], repeat_last=True
    ) as server:
        provider = _provider(server)
        texts = [(await provider.collect(REQUEST)).text for _ in range(3)]
        await provider.aclose()
    assert texts == ["again"] * 3 and server.errors == []


async def test_tuple_responses_and_content_length_bodies_work() -> None:
    body = sse_body(openai_events("plain body"))
    async with LocalSSEServer([(200, {"content-type": "text/event-stream"}, [body], 0.0)]) as server:
        server.add(SSEResponse(pieces=[body], chunked=False))
        provider = _provider(server)
        assert (await provider.collect(REQUEST)).text == "plain body"
        assert (await provider.collect(REQUEST)).text == "plain body"
        await provider.aclose()


async def test_connection_dropped_mid_body_is_truncated_with_partial_text() -> None:
    events = openai_events("partial words here")
    body = sse_body(events[:3])  # role chunk + two words, no finish
    async with LocalSSEServer([SSEResponse(pieces=split_every(body, 50), abort=True)]) as server:
        result, chunks = await run_stream(_provider(server, max_retries=2))
        assert len(server.requests) == 1  # output was yielded: never retried
    assert isinstance(result.error, StreamTruncatedError)
    assert result.text == "partial words"


async def test_idle_gap_between_chunks_times_out_after_partial_output() -> None:
    body = sse_body(openai_events("slow stream"))
    async with LocalSSEServer([SSEResponse(pieces=split_every(body, 200), delay=0.3)]) as server:
        result, _ = await run_stream(_provider(server, first_byte_timeout=1.0, idle_timeout=0.1))
    assert isinstance(result.error, ProviderTimeoutError)
    assert result.error.phase in ("first_byte", "idle")


async def test_no_first_byte_in_time_is_a_first_byte_timeout() -> None:
    body = sse_body(openai_events("late"))
    async with LocalSSEServer([SSEResponse(pieces=[body], headers_delay=0.5)]) as server:
        started = time.monotonic()
        result, chunks = await run_stream(_provider(server, first_byte_timeout=0.1))
    assert chunks == []
    assert isinstance(result.error, ProviderTimeoutError) and result.error.phase == "first_byte"
    assert time.monotonic() - started < 0.45


async def test_429_is_retried_after_retry_after_ms_then_succeeds() -> None:
    limited = SSEResponse(
        429,
        {"content-type": "application/json", "retry-after-ms": "150"},
        [b'{"error":{"message":"slow down","code":"rate_limit_exceeded"}}'],
    )
    ok = SSEResponse(pieces=[sse_body(openai_events("after the wait"))])
    async with LocalSSEServer([limited, ok]) as server:
        provider = _provider(server, max_retries=1)
        started = time.monotonic()
        result = await provider.collect(REQUEST)
        elapsed = time.monotonic() - started
        await provider.aclose()
    assert result.text == "after the wait"
    assert len(server.requests) == 2 and server.requests[0] == server.requests[1]
    assert elapsed >= 0.15


async def test_429_without_retries_left_raises_rate_limited() -> None:
    limited = SSEResponse(
        429, {"content-type": "application/json", "retry-after": "7"}, [b'{"error":{"message":"slow down"}}']
    )
    async with LocalSSEServer([limited]) as server:
        provider = _provider(server)
        with pytest.raises(RateLimitedError) as info:
            await provider.collect(REQUEST)
        await provider.aclose()
    assert info.value.retry_after_s == 7.0


async def test_refused_connection_is_a_connection_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = OpenAICompatProvider(f"http://127.0.0.1:{port}/v1", "", "m", max_retries=0)
    with pytest.raises(ProviderConnectionError):
        await provider.collect(REQUEST)
    await provider.aclose()


async def test_closing_the_stream_early_closes_the_response() -> None:
    body = sse_body(openai_events("one two three four five six"))
    async with LocalSSEServer([SSEResponse(pieces=split_every(body, 100), delay=0.05)]) as server:
        provider = _provider(server)
        stream = provider.stream(REQUEST)
        await anext(stream)
        await stream.aclose()
        await asyncio.wait_for(provider.aclose(), 1.0)


async def test_server_records_non_json_bodies_as_none() -> None:
    async with (
        LocalSSEServer([SSEResponse(pieces=[b"data: [DONE]\n\n"])]) as server,
        httpx2.AsyncClient() as client,
    ):
        response = await client.post(server.url + "/anything", content=b"not json")
        assert response.status_code == 200
    assert server.requests == [None] and server.recorded[0].body == b"not json"
