"""Request bodies built from neutral messages (OpenAI Chat Completions and Anthropic Messages)."""

from __future__ import annotations

import json

import httpx2
import pytest

from providers.anthropic import AnthropicProvider
from providers.blocks import ImageBlock, RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock
from providers.errors import AuthenticationError
from providers.messages import Message, ToolDefinition
from providers.openai_compat import OpenAICompatProvider
from providers.testing import openai_events, sse_body
from providers.types import ProviderRequest

TOOL = ToolDefinition(
    "current_time", "Current time", {"type": "object", "properties": {"timezone": {"type": "string"}}}
)
CALL = ToolUseBlock("call_abc", "current_time", {"timezone": "UTC"})


def conversation() -> list[Message]:
    return [
        Message.system("You are PicoBot."),
        Message.user("What time is it?"),
        Message.assistant("Let me check.", reasoning="need the tool", tool_calls=[CALL]),
        Message.tool_result("call_abc", "10:42 UTC", tool_name="current_time"),
        Message.system("Extra rule."),
        Message.user("Thanks", images=[ImageBlock("image/png", "aGk=")]),
    ]


def openai_body(messages: list[Message], **kwargs) -> dict:
    provider = OpenAICompatProvider("http://x/v1", "k", "gpt-test", **kwargs)
    return provider.build_body(ProviderRequest(messages, [TOOL], temperature=0.2))


def test_openai_sends_exactly_one_system_message_first() -> None:
    messages = openai_body(conversation())["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[0]["content"] == "You are PicoBot.\n\nExtra rule."


def test_openai_rebuilds_assistant_tool_calls_and_tool_results_carry_the_call_id() -> None:
    messages = openai_body(conversation())["messages"]
    assert messages[2] == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "current_time", "arguments": '{"timezone": "UTC"}'},
            }
        ],
    }
    assert messages[3] == {"role": "tool", "tool_call_id": "call_abc", "content": "10:42 UTC"}


def test_openai_images_become_data_urls() -> None:
    content = openai_body(conversation())["messages"][4]["content"]
    assert content == [
        {"type": "text", "text": "Thanks"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
    ]


def test_openai_body_streams_with_usage_tools_and_options() -> None:
    body = openai_body([Message.user("hi")], max_tokens=256)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "gpt-test" and body["max_tokens"] == 256 and body["temperature"] == 0.2
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "current_time",
                "description": "Current time",
                "parameters": TOOL.parameters,
            },
        }
    ]
    assert "system" not in [m["role"] for m in body["messages"]]


def test_openai_assistant_with_only_tool_calls_has_null_content() -> None:
    body = openai_body([Message.user("q"), Message.assistant(tool_calls=[CALL])])
    assert body["messages"][1]["content"] is None


def test_openai_replays_reasoning_content_only_when_its_own_state_asks_for_it() -> None:
    state = {"provider": "openai", "endpoint": "x/v1", "reasoning_field": "reasoning_content"}
    with_state = Message.assistant("", reasoning="hmm", tool_calls=[CALL], provider_state=state)
    assert openai_body([Message.user("q"), with_state])["messages"][1]["reasoning_content"] == "hmm"
    other = Message.assistant(
        "", reasoning="hmm", tool_calls=[CALL], provider_state={**state, "provider": "anthropic"}
    )
    assert "reasoning_content" not in openai_body([Message.user("q"), other])["messages"][1]
    no_calls = Message.assistant("answer", reasoning="hmm", provider_state=state)
    assert "reasoning_content" not in openai_body([Message.user("q"), no_calls])["messages"][1]


@pytest.mark.parametrize(
    "state",
    [
        {"provider": "openai", "endpoint": "api.deepseek.com/v1", "reasoning_field": "reasoning_content"},
        {"provider": "openai", "endpoint": "x/v2", "reasoning_field": "reasoning_content"},
        {"provider": "openai", "reasoning_field": "reasoning_content"},  # written before endpoints
    ],
    ids=["other-host", "other-path", "no-endpoint"],
)
def test_openai_reasoning_content_never_goes_to_another_endpoint_of_the_same_name(state) -> None:
    message = Message.assistant("", reasoning="hmm", tool_calls=[CALL], provider_state=state)
    assert "reasoning_content" not in openai_body([Message.user("q"), message])["messages"][1]


def test_openai_sends_invalid_arguments_as_the_model_sent_them() -> None:
    broken = ToolUseBlock("call_bad", "current_time", {}, raw_arguments='{"timezone": "UT')
    calls = openai_body([Message.user("q"), Message.assistant(tool_calls=[CALL, broken])])["messages"][1]
    assert [c["function"]["arguments"] for c in calls["tool_calls"]] == [
        '{"timezone": "UTC"}',
        '{"timezone": "UT',
    ]


def test_anthropic_sends_invalid_arguments_as_an_empty_input() -> None:
    broken = ToolUseBlock("call_bad", "current_time", {}, raw_arguments="[1, 2]")
    blocks = anthropic_body([Message.user("q"), Message.assistant(tool_calls=[broken])])["messages"][1][
        "content"
    ]
    assert blocks == [{"type": "tool_use", "id": "call_bad", "name": "current_time", "input": {}}]


async def test_openai_request_goes_to_chat_completions_with_a_bearer_key() -> None:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, content=sse_body(openai_events("ok"))
        )

    provider = OpenAICompatProvider(
        "http://llm.test/v1/", "sk-secret", "m", transport=httpx2.MockTransport(handler)
    )
    assert (await provider.collect(ProviderRequest([Message.user("hi")]))).text == "ok"
    await provider.aclose()
    assert str(seen[0].url) == "http://llm.test/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sk-secret"
    assert json.loads(seen[0].content)["messages"] == [{"role": "user", "content": "hi"}]
    assert "sk-secret" not in repr(provider)


def anthropic_body(messages: list[Message]) -> dict:
    return AnthropicProvider("https://api.anthropic.test/v1", "k", "claude-test").build_body(
        ProviderRequest(messages, [TOOL])
    )


def test_anthropic_system_is_top_level_and_tool_results_are_user_blocks() -> None:
    body = anthropic_body(conversation())
    assert body["system"] == "You are PicoBot.\n\nExtra rule."
    assert body["max_tokens"] == 4096 and body["stream"] is True
    assert [t["role"] for t in body["messages"]] == ["user", "assistant", "user"]
    assistant, results = body["messages"][1]["content"], body["messages"][2]["content"]
    assert assistant == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "call_abc", "name": "current_time", "input": {"timezone": "UTC"}},
    ]
    assert results[0] == {"type": "tool_result", "tool_use_id": "call_abc", "content": "10:42 UTC"}
    assert results[1:] == [
        {"type": "text", "text": "Thanks"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}},
    ]
    assert body["tools"] == [
        {"name": "current_time", "description": "Current time", "input_schema": TOOL.parameters}
    ]


def test_anthropic_replays_signed_thinking_only_for_its_own_state() -> None:
    content = [ThinkingBlock("hmm", "sig"), RedactedThinkingBlock("enc"), TextBlock(""), TextBlock("Hi")]
    own = Message("assistant", content, {"provider": "anthropic", "endpoint": "api.anthropic.test"})
    blocks = anthropic_body([Message.user("q"), own])["messages"][1]["content"]
    assert blocks == [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "redacted_thinking", "data": "enc"},
        {"type": "text", "text": "Hi"},
    ]
    for state in (
        {"provider": "openai", "endpoint": "api.anthropic.test"},
        {"provider": "anthropic", "endpoint": "api.other-vendor.test/anthropic"},
        {"provider": "anthropic"},  # written before endpoints: the same API cannot be proven
    ):
        foreign = Message("assistant", content, state)
        assert anthropic_body([Message.user("q"), foreign])["messages"][1]["content"] == [
            {"type": "text", "text": "Hi"}
        ]


def test_anthropic_keeps_the_content_order_of_interleaved_thinking() -> None:
    own = {"provider": "anthropic", "endpoint": "api.anthropic.test"}
    content = [ThinkingBlock("a", "s1"), TextBlock("Let me check."), ThinkingBlock("b", "s2"), CALL]
    blocks = anthropic_body([Message.user("q"), Message("assistant", content, own)])["messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["thinking", "text", "thinking", "tool_use"]
    assert [b.get("signature") for b in blocks] == ["s1", None, "s2", None]


def test_anthropic_error_results_are_flagged() -> None:
    messages = [
        Message.user("q"),
        Message.assistant(tool_calls=[CALL]),
        Message.tool_result("call_abc", "boom", is_error=True),
    ]
    block = anthropic_body(messages)["messages"][2]["content"][0]
    assert block == {"type": "tool_result", "tool_use_id": "call_abc", "content": "boom", "is_error": True}


async def test_anthropic_request_uses_v1_messages_and_its_headers() -> None:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(
            401, json={"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}
        )

    provider = AnthropicProvider(
        "https://api.anthropic.test", "sk-ant", "claude-test", transport=httpx2.MockTransport(handler)
    )
    with pytest.raises(AuthenticationError) as info:
        await provider.collect(ProviderRequest([Message.user("hi")]))
    await provider.aclose()
    assert info.value.provider_code == "authentication_error" and info.value.http_status == 401
    assert str(seen[0].url) == "https://api.anthropic.test/v1/messages"
    assert seen[0].headers["x-api-key"] == "sk-ant" and seen[0].headers["anthropic-version"] == "2023-06-01"


def test_anthropic_requests_with_thinking_never_carry_a_temperature():
    from providers._anthropic_request import build_messages_request
    from providers.messages import Message
    from providers.types import ProviderRequest

    request = ProviderRequest([Message.user("hi")], temperature=0.2)
    with_thinking = build_messages_request(request, model="c", max_tokens=4096, thinking_budget=2048)
    without = build_messages_request(request, model="c", max_tokens=4096, thinking_budget=None)
    assert "temperature" not in with_thinking and with_thinking["thinking"]["budget_tokens"] == 2048
    assert without["temperature"] == 0.2
