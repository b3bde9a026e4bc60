"""Review round 3: stream-end rules, malformed events, think-tag edges, error hygiene.

Streams go through the real providers over httpx2.MockTransport, read whole, one read per event
and one byte at a time (the three delivery modes of the cases).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx2
import pytest

from providers.anthropic import AnthropicProvider
from providers.chunks import ProviderChunk, ReasoningDelta, TextDelta
from providers.config import ProviderConfig
from providers.errors import parse_retry_after
from providers.factory import build_provider
from providers.openai_compat import OpenAICompatProvider
from providers.testing import split_events, split_every, sse_body
from providers.types import AssistantResponse
from tests.providers._cases import run_stream

SSE = {"content-type": "text/event-stream"}
KEY = "sk-SECRETKEY1234567"


def _transport(responses: list[tuple[int, dict[str, str], Any]]) -> httpx2.MockTransport:
    """Serves ``responses`` in order (the last one again); a body is a list of pieces or an
    async-iterator factory."""
    served = [0]

    def handler(request: httpx2.Request) -> httpx2.Response:
        status, headers, body = responses[min(served[0], len(responses) - 1)]
        served[0] += 1
        if callable(body):
            return httpx2.Response(status, headers=headers, content=body())

        async def pieces() -> AsyncIterator[bytes]:
            for piece in body:
                yield piece

        return httpx2.Response(status, headers=headers, content=pieces())

    return httpx2.MockTransport(handler)


def _provider(vendor: str, transport: httpx2.MockTransport, **kwargs: Any):
    kwargs.setdefault("max_retries", 0)
    if vendor == "anthropic":
        return AnthropicProvider("http://provider.test", KEY, "claude-test", transport=transport, **kwargs)
    return OpenAICompatProvider("http://provider.test/v1", KEY, "test-model", transport=transport, **kwargs)


async def all_modes(
    body: bytes, vendor: str = "openai", **kwargs: Any
) -> list[tuple[str, AssistantResponse, list[ProviderChunk]]]:
    out = []
    modes = {"whole": [body], "per-event": split_events(body), "1-byte": split_every(body, 1)}
    for mode, pieces in modes.items():
        provider = _provider(vendor, _transport([(200, SSE, pieces)]), **kwargs)
        result, chunks = await run_stream(provider)
        out.append((mode, result, chunks))
    return out


def oc(delta: dict | None = None, finish: str | None = None) -> dict:
    return {"id": "x", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


ROLE = oc({"role": "assistant", "content": ""})
MS = ("message_start", {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3}}})
MSTOP = ("message_stop", {"type": "message_stop"})


def bs(i: int, block: dict) -> tuple[str, dict]:
    return ("content_block_start", {"type": "content_block_start", "index": i, "content_block": block})


def bd(i: int, delta: dict) -> tuple[str, dict]:
    return ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})


def st(i: int) -> tuple[str, dict]:
    return ("content_block_stop", {"type": "content_block_stop", "index": i})


def md(reason: str) -> tuple[str, dict]:
    return (
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 2}},
    )


def texts(chunks: list[ProviderChunk]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


# --- 1. finish_reason "error" without an error object ------------------------------------------


async def test_finish_reason_error_without_an_error_object_is_an_in_band_error() -> None:
    body = sse_body([ROLE, oc({"content": "partial"}), oc({}, "error"), "[DONE]"])
    for mode, result, _ in await all_modes(body):
        assert result.error is not None and result.error.kind == "provider_error", mode
        assert (result.text, result.finish_reason) == ("partial", "error"), mode


# --- 2. Anthropic message_stop with a block still open -----------------------------------------


async def test_anthropic_message_stop_with_an_open_tool_use_fails_and_emits_no_call() -> None:
    body = sse_body(
        [
            MS,
            bs(0, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}),
            bd(0, {"type": "input_json_delta", "partial_json": '{"path": "no'}),
            md("tool_use"),
            MSTOP,
        ]
    )
    for mode, result, _ in await all_modes(body, "anthropic"):
        assert result.error is not None and result.error.kind == "truncated", mode
        assert result.tool_calls == [], mode


async def test_anthropic_message_stop_closes_an_open_text_block() -> None:
    body = sse_body(
        [MS, bs(0, {"type": "text", "text": ""}), bd(0, {"type": "text_delta", "text": "Hi"}), MSTOP]
    )
    for mode, result, _ in await all_modes(body, "anthropic"):
        assert (result.error, result.text) == (None, "Hi"), mode


# --- 3. implicit_think_start -------------------------------------------------------------------


async def test_implicit_start_switches_off_when_the_server_separates_reasoning() -> None:
    body = sse_body(
        [
            ROLE,
            oc({"reasoning_content": "thinking hard"}),
            oc({"content": "The answer is 4."}),
            oc({}, "stop"),
        ]
    )
    for mode, result, _ in await all_modes(body, implicit_think_start=True):
        assert (result.text, result.reasoning) == ("The answer is 4.", "thinking hard"), mode


async def test_implicit_start_without_a_closing_tag_is_text() -> None:
    body = sse_body([ROLE, oc({"content": "Hello there, "}), oc({"content": "no thinking."}), oc({}, "stop")])
    for mode, result, _ in await all_modes(body, implicit_think_start=True):
        assert (result.text, result.reasoning) == ("Hello there, no thinking.", None), mode


async def test_implicit_start_with_an_explicit_opening_tag_does_not_leak_it() -> None:
    body = sse_body([ROLE, oc({"content": "<think>\nr\n</think>\n\nAns"}), oc({}, "stop"), "[DONE]"])
    for mode, result, chunks in await all_modes(body, implicit_think_start=True):
        assert (result.text, result.reasoning) == ("Ans", "r"), mode
        assert "<think>" not in "".join(c.text for c in chunks if isinstance(c, ReasoningDelta)), mode


# --- 4. context overflow phrasings -------------------------------------------------------------


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


# --- 5. malformed events -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        bs(0, "text"),
        (
            "content_block_start",
            {"type": "content_block_start", "index": [0], "content_block": {"type": "text"}},
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": "0", "content_block": {"type": "text"}},
        ),
        bd(0, "oops"),  # type: ignore[arg-type]
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": None, "delta": {"type": "text_delta"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": {}}),
        ("message_delta", {"type": "message_delta", "delta": "end_turn"}),
    ],
)
async def test_malformed_anthropic_events_are_bad_responses(event) -> None:
    body = sse_body(
        [
            MS,
            bs(0, {"type": "text", "text": "a"})
            if event[1].get("index") != 0
            else ("ping", {"type": "ping"}),
            event,
            MSTOP,
        ]
    )  # noqa: E501
    for mode, result, _ in await all_modes(body, "anthropic"):
        assert result.error is not None and result.error.kind == "http_error", mode
        assert "malformed" in result.error.message, mode


async def test_anthropic_message_start_with_a_non_object_message_is_a_bad_response() -> None:
    body = sse_body([("message_start", {"type": "message_start", "message": []}), MSTOP])
    for mode, result, _ in await all_modes(body, "anthropic"):
        assert result.error is not None and result.error.kind == "http_error", mode


@pytest.mark.parametrize(
    "chunk",
    [
        {"choices": {"0": 1}},
        {"choices": ["x"]},
        {"choices": [{"index": [0], "delta": {"content": "x"}}]},
        {"choices": [{"index": 0, "delta": [1]}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": "x"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": ["x"]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "0", "function": {"name": "f"}}]}}]},
    ],
)
async def test_malformed_openai_chunks_are_bad_responses(chunk: dict) -> None:
    body = sse_body([ROLE, chunk, oc({"content": "ok"}), oc({}, "stop"), "[DONE]"])
    for mode, result, _ in await all_modes(body):
        assert result.error is not None and result.error.kind == "http_error", mode


async def test_openai_null_choices_and_delta_are_still_fine() -> None:
    body = sse_body(
        [
            ROLE,
            {"choices": None, "usage": None},
            {"choices": [{"index": 0, "delta": None}]},
            oc({"content": "ok"}),
            oc({}, "stop"),
        ]
    )  # noqa: E501
    for mode, result, _ in await all_modes(body):
        assert (result.error, result.text) == (None, "ok"), mode


# --- 6. think tags off for native Anthropic ----------------------------------------------------


def test_factory_turns_think_tags_off_for_anthropic_unless_asked() -> None:
    base = ProviderConfig(provider="anthropic", model="claude", api_key="k", think_tags=True)
    assert build_provider(base).think_tags is False
    assert build_provider(replace(base, anthropic_think_tags=True)).think_tags is True
    assert AnthropicProvider("http://x", "k", "m").think_tags is False


async def test_anthropic_text_with_a_literal_think_tag_stays_text() -> None:
    text = "Use the <reasoning> tag like <reasoning>x</reasoning>."
    body = sse_body(
        [
            MS,
            bs(0, {"type": "text", "text": ""}),
            bd(0, {"type": "text_delta", "text": text}),
            st(0),
            md("end_turn"),
            MSTOP,
        ]
    )  # noqa: E501
    for mode, result, _ in await all_modes(body, "anthropic"):
        assert (result.text, result.reasoning) == (text, None), mode


# --- 7. secrets and markup in error messages ---------------------------------------------------


async def test_an_echoed_key_is_redacted_from_the_error_message() -> None:
    body = json.dumps({"error": {"message": f"Invalid API key: {KEY} (also sk-ant-api03-abcdefgh)"}}).encode()
    provider = _provider("openai", _transport([(401, {"content-type": "application/json"}, [body])]))
    result, _ = await run_stream(provider)
    assert result.error is not None and "SECRETKEY" not in result.error.message
    assert "abcdefgh" not in result.error.message and "SECRETKEY" not in str(result.error)
    assert "Invalid API key" in result.error.message


async def test_an_html_error_page_is_summarised() -> None:
    page = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502</h1></body></html>"
    provider = _provider("openai", _transport([(502, {"content-type": "text/html"}, [page])]))
    result, _ = await run_stream(provider)
    assert result.error is not None and result.error.kind == "server_error"
    assert result.error.message == "HTTP 502 with an HTML body: 502 Bad Gateway"


def test_repr_never_shows_url_credentials() -> None:
    provider = OpenAICompatProvider("https://user:sk-SECRETKEY123@proxy.example/v1?key=abc", "k", "m")
    assert "SECRET" not in repr(provider) and "key=abc" not in repr(provider)
    assert "proxy.example/v1" in repr(provider)


# --- 8. unframed JSON error on an event stream -------------------------------------------------


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


# --- 9. held think-tag prefixes on failure -----------------------------------------------------


async def test_a_held_tag_prefix_is_not_shown_and_does_not_block_a_retry() -> None:
    half = sse_body([ROLE, oc({"content": "<thi"})])
    ok = sse_body([ROLE, oc({"content": "hello"}), oc({}, "stop"), "[DONE]"])

    def resets():
        async def body() -> AsyncIterator[bytes]:
            yield half
            raise httpx2.ReadError("reset")

        return body

    provider = _provider(
        "openai", _transport([(200, SSE, resets()), (200, SSE, [ok])]), max_retries=1, retry_backoff=0.0
    )  # noqa: E501
    result, chunks = await run_stream(provider)
    assert (result.error, result.text) == (None, "hello")
    assert "<thi" not in texts(chunks)


async def test_an_unterminated_closing_tag_does_not_leak_into_reasoning() -> None:
    body = sse_body([ROLE, oc({"content": "<think>abc</thi"}), oc({}, "stop"), "[DONE]"])
    for mode, result, _ in await all_modes(body):
        assert (result.reasoning, result.text) == ("abc", ""), mode


# --- 10. thinking budget -----------------------------------------------------------------------


@pytest.mark.parametrize(("budget", "max_tokens"), [(500, None), (4096, None), (8000, 8000), (2000, 1500)])
def test_an_invalid_thinking_budget_is_refused_at_construction(budget, max_tokens) -> None:
    with pytest.raises(ValueError, match="PICOBOT_LLM_THINKING_BUDGET.*PICOBOT_LLM_MAX_TOKENS"):
        AnthropicProvider("http://x", "k", "m", thinking_budget=budget, max_tokens=max_tokens)
    assert AnthropicProvider("http://x", "k", "m", thinking_budget=1024).thinking_budget == 1024


# --- 11. nameless and duplicate tool calls -----------------------------------------------------


async def test_an_openai_tool_call_without_a_name_is_passed_on_for_the_agent_loop_to_answer() -> None:
    # The agent loop gives it an error result and sends it back as ``unnamed_tool`` (QA 6c: failing
    # the stream ended the turn as "provider (http_error)").
    call = {"index": 0, "id": "c1", "function": {"arguments": "{}"}}
    body = sse_body([ROLE, oc({"tool_calls": [call]}), oc({}, "tool_calls"), "[DONE]"])
    for mode, result, _ in await all_modes(body):
        assert result.error is None, mode
        assert [(c.id, c.name) for c in result.tool_calls] == [("c1", "")], mode


async def test_an_anthropic_tool_use_without_a_name_is_passed_on_and_one_started_twice_fails() -> None:
    start = bs(0, {"type": "tool_use", "id": "t1", "name": "f", "input": {}})
    nameless = bs(0, {"type": "tool_use", "id": "t1", "input": {}})
    for mode, result, _ in await all_modes(sse_body([MS, nameless, st(0), md("tool_use"), MSTOP]), "anthropic"):
        assert result.error is None, mode
        assert [(c.id, c.name) for c in result.tool_calls] == [("t1", "")], mode
    for mode, result, _ in await all_modes(sse_body([MS, start, start, st(0), md("tool_use"), MSTOP]), "anthropic"):
        assert result.error is not None and result.error.kind == "http_error", mode
        assert result.tool_calls == [], mode


# --- 12. terminal event, then the connection fails ---------------------------------------------


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
@pytest.mark.parametrize("how", ["reset", "stall"])
async def test_a_complete_answer_survives_a_reset_or_stall_after_its_terminal_event(vendor, how) -> None:
    if vendor == "openai":
        body = sse_body([ROLE, oc({"content": "full answer"}), oc({}, "stop")])
    else:
        events = [
            MS,
            bs(0, {"type": "text", "text": ""}),
            bd(0, {"type": "text_delta", "text": "full answer"}),
            st(0),
            md("end_turn"),
        ]  # noqa: E501
        body = sse_body(events)

    def broken():
        async def gen() -> AsyncIterator[bytes]:
            yield body
            if how == "stall":
                await asyncio.sleep(5)
            raise httpx2.ReadError("reset")

        return gen

    provider = _provider(vendor, _transport([(200, SSE, broken())]), idle_timeout=0.2)
    result, _ = await run_stream(provider)
    assert (result.error, result.text) == (None, "full answer")


# --- 14/15 -------------------------------------------------------------------------------------


async def test_anthropic_stream_with_no_content_and_no_stop_reason_is_empty() -> None:
    body = sse_body([MS, ("ping", {"type": "ping"}), MSTOP])
    for mode, result, _ in await all_modes(body, "anthropic"):
        assert result.error is not None and "empty stream" in result.error.message, mode


def test_infinite_retry_after_is_clamped() -> None:
    assert parse_retry_after({"retry-after": "inf"}) == 86400.0
    assert parse_retry_after({"retry-after-ms": "1e400"}) == 86400.0
    assert parse_retry_after({"retry-after": "nan"}) is None


async def test_an_empty_error_object_mid_stream_is_still_an_error_but_a_null_one_is_not():
    ok_chunk = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Hi"}}]}
    failing = sse_body([{**ok_chunk, "error": None}, {"error": {}}, "[DONE]"])
    for mode, result, _ in await all_modes(failing):
        assert result.error is not None and result.error.kind == "provider_error", mode
        assert result.text == "Hi", mode
    fine = sse_body([{**ok_chunk, "error": None}, {**ok_chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, "[DONE]"])
    for mode, result, _ in await all_modes(fine):
        assert result.error is None and result.text == "Hi", mode


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, {"error": {"code": 400, "type": "exceed_context_size_error",
                         "message": "request (9412 tokens) exceeds the available context size (8192 tokens)"}}),
        (400, {"code": "invalid-argument",
               "error": "This model's maximum prompt length is 131072 but the request contains 140000 tokens."}),
    ],
    ids=["llama.cpp", "xai"],
)
async def test_context_overflow_of_llama_cpp_and_xai_is_recognised(status, body):
    from providers.errors import ContextOverflowError

    provider = _provider("openai", _transport([(status, {"content-type": "application/json"}, [json.dumps(body).encode()])]))
    result, _ = await run_stream(provider)
    assert isinstance(result.error, ContextOverflowError)


def test_an_explicit_unclosed_think_span_stays_reasoning_in_implicit_start_mode():
    from providers.think import ThinkTagSplitter

    splitter = ThinkTagSplitter(implicit_start=True)
    pieces = splitter.feed("<think>r only") + splitter.flush()
    assert "".join(t for k, t in pieces if k == "text") == ""
    assert "".join(t for k, t in pieces if k == "reasoning").strip() == "r only"
    # Without the explicit tag and without a closing one, the held text is the answer (SC-02 rule).
    splitter = ThinkTagSplitter(implicit_start=True)
    pieces = splitter.feed("just an answer") + splitter.flush()
    assert "".join(t for k, t in pieces if k == "text") == "just an answer"


async def test_anthropic_arguments_for_a_tool_use_that_never_started_fail_the_stream():
    body = sse_body([
        ("message_start", {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "input_json_delta", "partial_json": "{\"a\": 1}"}}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 2}}),
        ("message_stop", {"type": "message_stop"}),
    ])
    for mode, result, _ in await all_modes(body, vendor="anthropic"):
        assert result.error is not None and "not an open tool_use" in result.error.message, mode
        assert result.tool_calls == [], mode


def test_anthropic_requests_with_thinking_never_carry_a_temperature():
    from providers._anthropic_request import build_messages_request
    from providers.messages import Message
    from providers.types import ProviderRequest

    request = ProviderRequest([Message.user("hi")], temperature=0.2)
    with_thinking = build_messages_request(request, model="c", max_tokens=4096, thinking_budget=2048)
    without = build_messages_request(request, model="c", max_tokens=4096, thinking_budget=None)
    assert "temperature" not in with_thinking and with_thinking["thinking"]["budget_tokens"] == 2048
    assert without["temperature"] == 0.2
