"""The neutral message model: constructors, views, and lossless JSON round-trip (seed 002)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from providers.blocks import (
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from providers.messages import Message, ToolDefinition, Usage, messages_from_json, messages_to_json
from providers.replay_identity import normalise_endpoint, replays_to

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=4)
blocks = st.one_of(
    st.builds(TextBlock, st.text()),
    st.builds(ThinkingBlock, st.text(), st.none() | st.text()),
    st.builds(RedactedThinkingBlock, st.text()),
    st.builds(ToolUseBlock, st.text(), st.text(), json_objects, st.none() | st.text()),
    st.builds(ToolResultBlock, st.text(), st.text(), st.booleans(), st.none() | st.text()),
    st.builds(ImageBlock, st.sampled_from(["image/png", "image/jpeg"]), st.text()),
)
messages = st.builds(
    Message,
    st.sampled_from(["system", "user", "assistant", "tool"]),
    st.lists(blocks, max_size=5),
    st.none() | json_objects,
)


@given(st.lists(messages, max_size=4))
def test_messages_survive_a_json_round_trip(original: list[Message]) -> None:
    assert messages_from_json(messages_to_json(original)) == original


@given(messages)
def test_message_dict_round_trip_is_lossless(message: Message) -> None:
    assert Message.from_dict(json.loads(json.dumps(message.to_dict()))) == message


def test_constructors_build_the_expected_blocks() -> None:
    image = ImageBlock("image/png", "aGk=")
    assert Message.system("be brief").content == [TextBlock("be brief")]
    assert Message.user("look", images=[image]).content == [TextBlock("look"), image]
    assert Message.user("", images=[image]).content == [image]
    call = ToolUseBlock("call_1", "current_time", {})
    assistant = Message.assistant("It is", reasoning="think", tool_calls=[call])
    assert assistant.content == [ThinkingBlock("think"), TextBlock("It is"), call]
    assert (assistant.text, assistant.reasoning, assistant.tool_calls) == ("It is", "think", [call])
    result = Message.tool_result("call_1", "10:42", tool_name="current_time")
    assert result.role == "tool" and result.content == [
        ToolResultBlock("call_1", "10:42", False, "current_time")
    ]


def test_assistant_drops_empty_text_and_has_no_reasoning_by_default() -> None:
    message = Message.assistant("  ", tool_calls=[ToolUseBlock("c", "t", {})])
    assert [type(b) for b in message.content] == [ToolUseBlock]
    assert message.reasoning is None and message.text == ""


def test_assistant_rebuilds_signed_thinking_blocks_from_provider_state() -> None:
    state = {
        "provider": "anthropic",
        "blocks": [
            {"type": "thinking", "text": "hmm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "xx"},
        ],
    }
    message = Message.assistant("Hi", reasoning="hmm", provider_state=state)
    assert message.content == [ThinkingBlock("hmm", "sig"), RedactedThinkingBlock("xx"), TextBlock("Hi")]
    assert message.provider_state == state


INTERLEAVED = {
    "provider": "anthropic",
    "endpoint": "api.anthropic.com",
    "blocks": [
        {"type": "thinking", "text": "first", "signature": "s1"},
        {"type": "text", "chars": 13},
        {"type": "thinking", "text": "second", "signature": "s2"},
        {"type": "redacted_thinking", "data": "enc"},
        {"type": "tool_use", "id": "t1"},
        {"type": "text", "chars": 5},
        {"type": "tool_use", "id": "t2"},
    ],
}


def test_assistant_rebuilds_the_stored_block_layout_of_interleaved_thinking() -> None:
    t1, t2 = ToolUseBlock("t1", "a", {}), ToolUseBlock("t2", "b", {"x": 1})
    message = Message.assistant(
        "Let me check.Then!", reasoning="firstsecond", tool_calls=[t1, t2], provider_state=INTERLEAVED
    )
    assert message.content == [
        ThinkingBlock("first", "s1"),
        TextBlock("Let me check."),
        ThinkingBlock("second", "s2"),
        RedactedThinkingBlock("enc"),
        t1,
        TextBlock("Then!"),
        t2,
    ]
    # The columns the database keeps give the same message back.
    again = Message.assistant(message.text, message.reasoning, message.tool_calls, message.provider_state)
    assert again == message


def test_a_layout_places_only_the_calls_it_has_and_appends_the_rest() -> None:
    # The last iteration drops unrun calls (t1 absent); a call the layout does not name goes last.
    t3 = ToolUseBlock("t3", "c", {})
    message = Message.assistant("Let me check.Then!", tool_calls=[t3], provider_state=INTERLEAVED)
    assert [type(b).__name__ for b in message.content][-2:] == ["TextBlock", "ToolUseBlock"]
    assert message.content[-1] == t3 and message.text == "Let me check.Then!"


def test_a_layout_inconsistent_with_the_text_falls_back_to_thinking_first() -> None:
    message = Message.assistant("changed text", provider_state=INTERLEAVED)
    assert message.content == [
        ThinkingBlock("first", "s1"),
        ThinkingBlock("second", "s2"),
        RedactedThinkingBlock("enc"),
        TextBlock("changed text"),
    ]


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("https://api.openai.com/v1", "api.openai.com/v1"),
        ("https://API.OpenAI.com:443/v1/", "api.openai.com/v1"),
        ("http://localhost:11434/v1", "localhost:11434/v1"),
        ("http://user:pw@127.0.0.1:80/v1?x=1#f", "127.0.0.1/v1"),
        ("https://api.anthropic.com", "api.anthropic.com"),
        ("http://[::1]:8080/", "[::1]:8080"),
    ],
)
def test_endpoints_normalise_host_port_and_path(url: str, endpoint: str) -> None:
    assert normalise_endpoint(url) == endpoint


def test_replay_needs_the_same_name_and_endpoint() -> None:
    state = {"provider": "openai", "endpoint": "api.deepseek.com", "reasoning_field": "reasoning_content"}
    assert replays_to(state, "openai", "api.deepseek.com")
    assert not replays_to(state, "openai", "api.openai.com/v1")
    assert not replays_to(state, "anthropic", "api.deepseek.com")
    legacy = {"provider": "openai", "reasoning_field": "reasoning_content"}
    assert not replays_to(legacy, "openai", "api.deepseek.com")  # no endpoint: cannot be proven
    assert replays_to(legacy, "openai", None) and not replays_to(None, "openai", None)


@pytest.mark.parametrize(
    "state",
    [
        {"blocks": "nope"},
        {"blocks": [{"type": "thinking"}]},
        {"blocks": [{"type": "text", "text": "x"}]},
        ["x"],
        "x",
    ],
)
def test_a_corrupt_provider_state_means_no_replay_not_an_error(state) -> None:
    message = Message.assistant("Hi", reasoning="plain", provider_state=state)
    assert message.content == [ThinkingBlock("plain"), TextBlock("Hi")]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([], "must be an object"),
        ({"role": "robot", "content": []}, "message.role"),
        ({"role": "user"}, "message.content"),
        ({"role": "user", "content": [{"type": "video"}]}, "'video' is not a known"),
        ({"role": "user", "content": [{"type": "text", "text": 3}]}, "content[0].text must be str"),
        (
            {"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b", "arguments": []}]},
            "arguments must be dict",
        ),
        (
            {
                "role": "tool",
                "content": [{"type": "tool_result", "tool_call_id": "a", "content": "x", "is_error": "no"}],
            },
            "is_error",
        ),
        ({"role": "user", "content": [], "provider_state": []}, "provider_state"),
    ],
)
def test_from_dict_rejects_bad_input_with_a_clear_message(data, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        Message.from_dict(data)


def test_messages_from_json_names_the_bad_message() -> None:
    with pytest.raises(ValueError, match=r"messages\[1\]"):
        messages_from_json('[{"role": "user", "content": []}, {"role": "x", "content": []}]')
    with pytest.raises(ValueError, match="not valid JSON"):
        messages_from_json("{")
    with pytest.raises(ValueError, match="array"):
        messages_from_json("{}")


def test_usage_adds_and_round_trips() -> None:
    total = Usage(3, 4) + Usage(10, 20)
    assert total == Usage(13, 24)
    assert Usage.from_dict(total.to_dict()) == total
    assert Usage.from_dict({}) == Usage()
    with pytest.raises(ValueError, match="input_tokens"):
        Usage.from_dict({"input_tokens": -1})
    with pytest.raises(ValueError, match="output_tokens"):
        Usage.from_dict({"output_tokens": True})


def test_tool_definition_is_a_plain_value() -> None:
    tool = ToolDefinition("current_time", "The time", {"type": "object", "properties": {}})
    assert tool.name == "current_time" and tool.parameters["type"] == "object"
