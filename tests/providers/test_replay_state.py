"""Replay state over real HTTP: keyed by endpoint, block order kept, invalid arguments kept raw.

Seed 003 §6.2: ``provider_state`` goes back only to the provider that produced it — the same
API endpoint, not just the same provider name (DeepSeek and OpenAI are both ``openai``).
Seed 003 §7.3: replay keeps the vendor's block order (interleaved thinking). Each test streams a
recorded-style body from LocalSSEServer into a real provider, turns the response into the
neutral message (and through the columns the database keeps), and reads the next request from
the bytes the server received.
"""

from __future__ import annotations

import json

from providers.anthropic import AnthropicProvider
from providers.blocks import ToolUseBlock
from providers.messages import Message
from providers.openai_compat import OpenAICompatProvider
from providers.testing import LocalSSEServer, SSEResponse, openai_events, split_every, sse_body
from providers.types import ProviderRequest

REASONING = "The user wants the time. I should call current_time."
SIG_1 = "U2lnbmF0dXJlT25lK2Zvci90aGlua2luZz0=" * 2
SIG_2 = "U2lnbmF0dXJlVHdvK2Zvci90aGlua2luZz0=" * 2
TOOL_ID = "toolu_01Interleaved"


def served(body: bytes) -> SSEResponse:
    return SSEResponse(pieces=split_every(body, 41))


def openai_answer() -> SSEResponse:
    return served(sse_body(openai_events("Done.")))


def db_columns(message: Message) -> Message:
    """The message rebuilt from what the database keeps (content, reasoning, tool_calls, state)."""
    return Message.assistant(message.text, message.reasoning, message.tool_calls, message.provider_state)


def follow_up(message: Message) -> ProviderRequest:
    call = message.tool_calls[0]
    return ProviderRequest(
        [
            Message.user("What time is it?"),
            message,
            Message.tool_result(call.id, "10:42 UTC", tool_name=call.name),
        ]
    )


# --- replay identity: OpenAI-compatible ---------------------------------------------------------


async def test_deepseek_reasoning_content_goes_back_to_its_endpoint_and_never_to_another_openai_server() -> (
    None
):
    first = served(
        sse_body(
            openai_events(reasoning=REASONING, tool_calls=[("call_1", "current_time", '{"timezone": "UTC"}')])
        )
    )
    async with (
        LocalSSEServer([first, openai_answer()]) as deepseek,
        LocalSSEServer([openai_answer()]) as openai,
    ):
        producer = OpenAICompatProvider(deepseek.base_url, "k", "deepseek-chat", max_retries=0)
        response = await producer.collect(ProviderRequest([Message.user("What time is it?")]))
        await producer.aclose()
        message = db_columns(response.to_message())
        endpoint = deepseek.base_url.removeprefix("http://")
        assert message.provider_state == {
            "provider": "openai",
            "endpoint": endpoint,
            "reasoning_field": "reasoning_content",
        }
        # Same endpoint (spelled with a trailing slash), another model: reasoning goes back.
        same = OpenAICompatProvider(deepseek.base_url + "/", "k", "deepseek-reasoner", max_retries=0)
        # Another OpenAI-compatible endpoint, also named "openai": it gets nothing of it.
        other = OpenAICompatProvider(openai.base_url, "k", "gpt-test", max_retries=0)
        for provider in (same, other):
            assert (await provider.collect(follow_up(message))).text == "Done."
            await provider.aclose()

    assistant = deepseek.requests[1]["messages"][1]
    assert assistant["reasoning_content"] == REASONING and assistant["tool_calls"][0]["id"] == "call_1"
    raw = openai.recorded[0].body.decode()
    assert "reasoning_content" not in raw and REASONING not in raw
    assert openai.requests[0]["messages"][1]["tool_calls"][0]["id"] == "call_1"


async def test_state_written_before_endpoints_existed_is_not_replayed() -> None:
    legacy = {"provider": "openai", "reasoning_field": "reasoning_content"}
    call = ToolUseBlock("call_1", "current_time", {})
    message = Message.assistant("", reasoning=REASONING, tool_calls=[call], provider_state=legacy)
    async with LocalSSEServer([openai_answer()]) as server:
        provider = OpenAICompatProvider(server.base_url, "k", "m", max_retries=0)
        await provider.collect(follow_up(message))
        await provider.aclose()
    assert "reasoning_content" not in server.recorded[0].body.decode()


# --- replay identity and block order: Anthropic -------------------------------------------------


def _event(kind: str, **fields: object) -> tuple[str, dict]:
    return kind, {"type": kind, **fields}


def _delta(index: int, **delta: object) -> tuple[str, dict]:
    return _event("content_block_delta", index=index, delta=delta)


def _start(index: int, **block: object) -> tuple[str, dict]:
    return _event("content_block_start", index=index, content_block=block)


def _message_start() -> tuple[str, dict]:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 1},
    }
    return _event("message_start", message=message)


def interleaved_body() -> bytes:
    """Interleaved thinking (recorded shape): thinking, text, thinking, redacted, tool_use, text."""
    return sse_body(
        [
            _message_start(),
            _start(0, type="thinking", thinking="", signature=""),
            _delta(0, type="thinking_delta", thinking="The user asks for the time."),
            _delta(0, type="signature_delta", signature=SIG_1),
            _event("content_block_stop", index=0),
            _start(1, type="text", text=""),
            _delta(1, type="text_delta", text="Let me check "),
            _delta(1, type="text_delta", text="the clock."),
            _event("content_block_stop", index=1),
            _event("ping"),
            _start(2, type="thinking", thinking="", signature=""),
            _delta(2, type="thinking_delta", thinking="UTC unless told otherwise."),
            _delta(2, type="signature_delta", signature=SIG_2),
            _event("content_block_stop", index=2),
            _start(3, type="redacted_thinking", data="RW5jcnlwdGVkUmVhc29uaW5n"),
            _event("content_block_stop", index=3),
            _start(4, type="tool_use", id=TOOL_ID, name="current_time", input={}),
            _delta(4, type="input_json_delta", partial_json='{"timezone"'),
            _delta(4, type="input_json_delta", partial_json=': "UTC"}'),
            _event("content_block_stop", index=4),
            _event(
                "message_delta",
                delta={"stop_reason": "tool_use", "stop_sequence": None},
                usage={"output_tokens": 77},
            ),
            _event("message_stop"),
        ]
    )


def anthropic_text(text: str) -> SSEResponse:
    return served(
        sse_body(
            [
                _message_start(),
                _start(0, type="text", text=""),
                _delta(0, type="text_delta", text=text),
                _event("content_block_stop", index=0),
                _event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3}),
                _event("message_stop"),
            ]
        )
    )


EXPECTED_ORDER = [
    {"type": "thinking", "thinking": "The user asks for the time.", "signature": SIG_1},
    {"type": "text", "text": "Let me check the clock."},
    {"type": "thinking", "thinking": "UTC unless told otherwise.", "signature": SIG_2},
    {"type": "redacted_thinking", "data": "RW5jcnlwdGVkUmVhc29uaW5n"},
    {"type": "tool_use", "id": TOOL_ID, "name": "current_time", "input": {"timezone": "UTC"}},
]


async def test_interleaved_thinking_is_replayed_in_the_order_it_streamed() -> None:
    async with LocalSSEServer([served(interleaved_body()), anthropic_text("10:42.")]) as server:
        provider = AnthropicProvider(server.url, "k", "claude-test", max_retries=0, thinking_budget=1024)
        response = await provider.collect(ProviderRequest([Message.user("What time is it?")]))
        message = db_columns(response.to_message())
        assert (message.text, message.reasoning) == (
            "Let me check the clock.",
            "The user asks for the time.UTC unless told otherwise.",
        )
        await provider.collect(follow_up(message))
        await provider.aclose()
    assert server.requests[1]["messages"][1] == {"role": "assistant", "content": EXPECTED_ORDER}
    for signature in (SIG_1, SIG_2):
        assert signature in server.recorded[1].body.decode()


async def test_signed_thinking_never_goes_to_another_anthropic_compatible_endpoint() -> None:
    async with (
        LocalSSEServer([served(interleaved_body()), anthropic_text("10:42.")]) as anthropic,
        LocalSSEServer([anthropic_text("10:42.")]) as compatible,
    ):
        producer = AnthropicProvider(anthropic.url + "/v1", "k", "claude-a", max_retries=0)
        message = db_columns(
            (await producer.collect(ProviderRequest([Message.user("What time is it?")]))).to_message()
        )
        assert message.provider_state["endpoint"] == anthropic.url.removeprefix("http://")
        same_api = AnthropicProvider(anthropic.url, "k", "claude-b", max_retries=0)  # another model
        other_api = AnthropicProvider(compatible.url, "k", "claude-a", max_retries=0)
        for provider in (same_api, other_api):
            await provider.collect(follow_up(message))
            await provider.aclose()
        await producer.aclose()
    assert anthropic.requests[1]["messages"][1]["content"] == EXPECTED_ORDER
    raw = compatible.recorded[0].body.decode()
    for secret in (SIG_1, SIG_2, "RW5jcnlwdGVkUmVhc29uaW5n", "thinking", "UTC unless told"):
        assert secret not in raw
    assert compatible.requests[0]["messages"][1]["content"] == [
        {"type": "text", "text": "Let me check the clock."},
        {"type": "tool_use", "id": TOOL_ID, "name": "current_time", "input": {"timezone": "UTC"}},
    ]


# --- invalid tool-call arguments ----------------------------------------------------------------


async def test_invalid_arguments_go_back_to_the_model_as_it_sent_them() -> None:
    broken = '{"timezone": "UT'
    first = served(sse_body(openai_events(tool_calls=[("call_bad", "current_time", broken)])))
    async with LocalSSEServer([first, openai_answer()]) as server:
        provider = OpenAICompatProvider(server.base_url, "k", "m", max_retries=0)
        response = await provider.collect(ProviderRequest([Message.user("What time is it?")]))
        message = db_columns(response.to_message())
        assert message.tool_calls == [ToolUseBlock("call_bad", "current_time", {}, raw_arguments=broken)]
        await provider.collect(follow_up(message))
        await provider.aclose()
    [call] = server.requests[1]["messages"][1]["tool_calls"]
    assert call == {
        "id": "call_bad",
        "type": "function",
        "function": {"name": "current_time", "arguments": broken},
    }
    assert json.dumps(broken)[1:-1] in server.recorded[1].body.decode()
