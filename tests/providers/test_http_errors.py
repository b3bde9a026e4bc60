"""HTTP-level failures become typed errors before any SSE parsing (SC-20, SC-21 and kin)."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from typing import Any

import httpx2
import pytest

from providers.errors import (
    AuthenticationError,
    BadResponseError,
    ContextOverflowError,
    OverloadedError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitedError,
    ServerError,
    StreamTruncatedError,
    parse_retry_after,
)
from providers.messages import Message
from providers.openai_compat import OpenAICompatProvider
from providers.testing import openai_events, sse_body
from providers.types import ProviderRequest
from tests.providers._cases import run_stream
from tests.providers._mock_sse import _provider, _transport, all_modes

REQUEST = ProviderRequest([Message.user("hi")])


async def fail_with(status: int, body: bytes | str, headers: dict[str, str] | None = None) -> ProviderError:
    content = body.encode() if isinstance(body, str) else body

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            status, headers={"content-type": "application/json", **(headers or {})}, content=content
        )

    provider = OpenAICompatProvider(
        "http://x/v1", "k", "m", transport=httpx2.MockTransport(handler), max_retries=0
    )
    with pytest.raises(ProviderError) as info:
        await provider.collect(REQUEST)
    await provider.aclose()
    return info.value


@pytest.mark.parametrize(
    ("status", "body", "error_type", "code"),
    [
        (
            401,
            '{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}',
            AuthenticationError,
            "invalid_api_key",
        ),
        (403, '{"error":{"message":"not allowed"}}', AuthenticationError, None),
        (
            500,
            '{"error":{"message":"internal","type":"server_error","code":null}}',
            ServerError,
            "server_error",
        ),
        (502, "<html>Bad Gateway</html>", ServerError, None),
        (504, "<html>Gateway Time-out</html>", ServerError, None),
        (503, "upstream unavailable", OverloadedError, None),
        (
            529,
            '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            OverloadedError,
            "overloaded_error",
        ),
        (
            400,
            '{"error":{"message":"This model\'s maximum context length is 8192 tokens","code":"context_length_exceeded"}}',
            ContextOverflowError,
            "context_length_exceeded",
        ),
        (
            400,
            '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}',
            ContextOverflowError,
            "invalid_request_error",
        ),
        (
            413,
            '{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}',
            ContextOverflowError,
            "request_too_large",
        ),
        (
            404,
            '{"error":{"message":"The model `nope` does not exist","code":"model_not_found"}}',
            BadResponseError,
            "model_not_found",
        ),
        (
            422,
            '{"object":"error","message":"bad param","type":"BadRequestError","code":422}',
            BadResponseError,
            422,
        ),
    ],
)
async def test_status_codes_map_to_typed_errors(status, body, error_type, code) -> None:
    error = await fail_with(status, body)
    assert type(error) is error_type
    assert (error.http_status, error.provider_code) == (status, code)
    assert error.retryable is (error_type in (ServerError, OverloadedError))


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (500, "server_error"),
        (502, "server_error"),
        (504, "server_error"),
        (503, "overloaded"),
        (529, "overloaded"),
    ],
)
async def test_only_503_and_529_are_overloaded_other_5xx_are_server_errors(status, kind) -> None:
    error = await fail_with(status, "{}")
    assert error.kind == kind and isinstance(error, ServerError) and error.retryable
    assert isinstance(error, OverloadedError) is (kind == "overloaded")


async def test_the_error_message_comes_from_the_body() -> None:
    error = await fail_with(401, '{"error":{"message":"Incorrect API key provided"}}')
    assert error.message == "Incorrect API key provided" and str(error) == error.message


async def test_429_reads_retry_after_seconds() -> None:
    error = await fail_with(
        429, '{"error":{"message":"slow","code":"rate_limit_exceeded"}}', {"retry-after": "7"}
    )
    assert isinstance(error, RateLimitedError) and error.retryable
    assert error.to_dict() == {
        "kind": "rate_limited",
        "http_status": 429,
        "provider_code": "rate_limit_exceeded",
        "message": "slow",
        "retry_after_s": 7.0,
    }


async def test_503_carries_retry_after_too() -> None:
    error = await fail_with(503, "{}", {"retry-after": "2"})
    assert isinstance(error, OverloadedError) and error.retry_after_s == 2.0


def test_retry_after_http_date_and_ms() -> None:
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert 28.0 <= parse_retry_after(httpx2.Headers({"Retry-After": date}), now=now) <= 30.0
    assert (
        parse_retry_after(
            httpx2.Headers({"Retry-After": email.utils.formatdate(now - 60, usegmt=True)}), now=now
        )
        == 0.0
    )
    assert parse_retry_after(httpx2.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert parse_retry_after(httpx2.Headers({"retry-after": "1.5"})) == 1.5
    assert parse_retry_after(httpx2.Headers({"retry-after": "soon"})) is None
    assert parse_retry_after(httpx2.Headers({})) is None


@pytest.mark.parametrize(
    ("content_type", "body", "code", "message"),
    [
        (
            "application/json",
            b'{"error":{"message":"The upstream model is temporarily unavailable.","code":"model_unavailable"}}',
            "model_unavailable",
            "temporarily unavailable",
        ),
        ("application/json", b"null", None, "non-SSE body (null)"),
        ("text/html", b"<html>gateway</html>", None, "text/html"),
        ("", b"", None, "no content-type"),
    ],
)
async def test_a_200_that_is_not_an_event_stream_is_never_an_empty_success(
    content_type, body, code, message
) -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=body)

    provider = OpenAICompatProvider(
        "http://x/v1", "k", "m", transport=httpx2.MockTransport(handler), max_retries=0
    )
    with pytest.raises(BadResponseError) as info:
        await provider.collect(REQUEST)
    await provider.aclose()
    assert (info.value.kind, info.value.http_status, info.value.provider_code) == ("http_error", 200, code)
    assert message in info.value.message


async def test_transport_failures_before_a_response_are_connection_errors() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    provider = OpenAICompatProvider(
        "http://x/v1", "k", "m", transport=httpx2.MockTransport(handler), max_retries=0
    )
    with pytest.raises(ProviderConnectionError) as info:
        await provider.collect(REQUEST)
    assert info.value.retryable and isinstance(info.value.__cause__, httpx2.ConnectError)


async def test_connect_timeout_is_a_timeout_error() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectTimeout("slow", request=request)

    provider = OpenAICompatProvider(
        "http://x/v1", "k", "m", transport=httpx2.MockTransport(handler), max_retries=0
    )
    with pytest.raises(ProviderTimeoutError) as info:
        await provider.collect(REQUEST)
    assert info.value.phase == "connect"


async def test_an_invalid_base_url_is_reported_not_retried() -> None:
    provider = OpenAICompatProvider("ftp://x/v1", "k", "m")
    with pytest.raises(ProviderConnectionError) as info:
        await provider.collect(REQUEST)
    assert not info.value.retryable


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/v1", "http://127.0.0.1:-1/v1", "http://h:port/v1"])
async def test_a_port_out_of_range_is_an_invalid_base_url_not_an_exception_group(url) -> None:
    """The socket layer raised OverflowError inside anyio's TaskGroup: an untyped ExceptionGroup."""
    provider = OpenAICompatProvider(url, "k", "m")
    with pytest.raises(ProviderConnectionError) as info:
        await provider.collect(REQUEST)
    assert not info.value.retryable
    assert "invalid base URL" in info.value.message and "Port" in info.value.message


async def test_first_byte_and_idle_timeouts_with_a_mock_transport() -> None:
    body = sse_body(openai_events("a b"))

    async def slow_start():
        await asyncio.sleep(1)
        yield body

    async def stalls_midway():
        yield body[:120]
        await asyncio.sleep(1)
        yield body[120:]

    for stream, phase in ((slow_start, "first_byte"), (stalls_midway, "idle")):

        def handler(request: httpx2.Request, stream=stream) -> httpx2.Response:
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

        provider = OpenAICompatProvider(
            "http://x/v1",
            "k",
            "m",
            transport=httpx2.MockTransport(handler),
            max_retries=0,
            first_byte_timeout=0.1,
            idle_timeout=0.1,
        )
        with pytest.raises(ProviderTimeoutError) as info:
            await provider.collect(REQUEST)
        assert info.value.phase == phase


async def test_a_read_error_mid_body_is_truncation() -> None:
    body = sse_body(openai_events("a b c"))

    async def breaks():
        yield body[:200]
        raise httpx2.ReadError("reset")

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=breaks())

    provider = OpenAICompatProvider(
        "http://x/v1", "k", "m", transport=httpx2.MockTransport(handler), max_retries=0
    )
    with pytest.raises(StreamTruncatedError, match="connection lost"):
        await provider.collect(REQUEST)


def test_infinite_retry_after_is_clamped() -> None:
    assert parse_retry_after({"retry-after": "inf"}) == 86400.0
    assert parse_retry_after({"retry-after-ms": "1e400"}) == 86400.0
    assert parse_retry_after({"retry-after": "nan"}) is None


async def test_an_html_error_page_is_summarised() -> None:
    page = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502</h1></body></html>"
    provider = _provider("openai", _transport([(502, {"content-type": "text/html"}, [page])]))
    result, _ = await run_stream(provider)
    assert result.error is not None and result.error.kind == "server_error"
    assert result.error.message == "HTTP 502 with an HTML body: 502 Bad Gateway"


@pytest.mark.parametrize(
    ("vendor", "body", "message", "retryable"),
    [
        ("openai", b'{"error":{"message":"Invalid model name","code":"400"}}', "Invalid model name", False),
        (
            "anthropic",
            b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n',
            "Overloaded",
            True,
        ),  # noqa: E501
    ],
)
async def test_an_unframed_json_error_on_an_event_stream_is_typed(vendor, body, message, retryable) -> None:
    for mode, result, _ in await all_modes(body, vendor):
        assert result.error is not None and result.error.kind == "provider_error", mode
        assert (result.error.message, result.error.retryable) == (message, retryable), mode


@pytest.mark.parametrize(
    ("vendor", "body"),
    [
        (
            "anthropic",
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000, decrease input length or `max_tokens` and try again",
                },
            },
        ),  # noqa: E501
        (
            "anthropic",
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 210000 tokens > 200000 maximum",
                },
            },
        ),  # noqa: E501
        (
            "openai",
            {"error": {"message": "This model's maximum context length is 128000 tokens.", "code": None}},
        ),
        ("openai", {"error": {"message": "Input too large", "code": "context_length_exceeded"}}),
        (
            "openai",
            [
                {
                    "error": {
                        "code": 400,
                        "message": "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
                    }
                }
            ],
        ),  # noqa: E501
    ],
)
async def test_context_overflow_phrasings(vendor: str, body: Any) -> None:
    provider = _provider(
        vendor, _transport([(400, {"content-type": "application/json"}, [json.dumps(body).encode()])])
    )
    result, _ = await run_stream(provider)
    assert result.error is not None and result.error.kind == "context_overflow"


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            400,
            {
                "error": {
                    "code": 400,
                    "type": "exceed_context_size_error",
                    "message": "request (9412 tokens) exceeds the available context size (8192 tokens)",
                }
            },
        ),
        (
            400,
            {
                "code": "invalid-argument",
                "error": "This model's maximum prompt length is 131072 but the request contains 140000 tokens.",
            },
        ),
    ],
    ids=["llama.cpp", "xai"],
)
async def test_context_overflow_of_llama_cpp_and_xai_is_recognised(status, body):
    from providers.errors import ContextOverflowError

    provider = _provider(
        "openai", _transport([(status, {"content-type": "application/json"}, [json.dumps(body).encode()])])
    )
    result, _ = await run_stream(provider)
    assert isinstance(result.error, ContextOverflowError)
