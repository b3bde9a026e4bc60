"""StreamAccumulator, ToolCall and AssistantResponse (the pure assembly layer)."""

from __future__ import annotations

import pytest

from providers.base import StreamAccumulator
from providers.blocks import TextBlock, ThinkingBlock, ToolUseBlock
from providers.chunks import (
    Done,
    ProviderStateChunk,
    ReasoningDelta,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
    UsageChunk,
)
from providers.errors import StreamTruncatedError
from providers.messages import Usage
from providers.types import AssistantResponse, ToolArgumentsError, ToolCall


def feed_all(chunks) -> StreamAccumulator:
    acc = StreamAccumulator()
    for chunk in chunks:
        acc.feed(chunk)
    return acc


def test_assembles_text_reasoning_calls_usage_and_state() -> None:
    acc = feed_all(
        [
            ReasoningDelta("think "),
            ReasoningDelta("more"),
            TextDelta("Hel"),
            TextDelta("lo"),
            ToolCallStart(0, "call_a", "get_weather"),
            ToolCallStart(1, "call_b", "get_time"),
            ToolCallArgumentsDelta(0, '{"city": '),
            ToolCallArgumentsDelta(1, "{}"),
            ToolCallArgumentsDelta(0, '"Oslo"}'),
            UsageChunk(Usage(1, 2)),
            UsageChunk(Usage(5, 6)),
            ProviderStateChunk({"provider": "x", "v": 1}),
            Done("tool_calls"),
        ]
    )
    result = acc.result()
    assert (result.text, result.reasoning, result.usage, result.finish_reason) == (
        "Hello",
        "think more",
        Usage(5, 6),
        "tool_calls",
    )
    assert result.tool_calls == [
        ToolCall("call_a", "get_weather", '{"city": "Oslo"}'),
        ToolCall("call_b", "get_time", "{}"),
    ]
    assert result.provider_state == {"provider": "x", "v": 1} and result.error is None and acc.done


def test_a_repeated_start_fills_a_missing_id_or_name() -> None:
    acc = feed_all(
        [
            ToolCallStart(0, "", ""),
            ToolCallArgumentsDelta(0, "{}"),
            ToolCallStart(0, "call_late", "f"),
            Done(None),
        ]
    )
    assert acc.result().tool_calls == [ToolCall("call_late", "f", "{}")]


def test_a_call_that_never_got_an_id_gets_a_generated_one() -> None:
    call = feed_all([ToolCallStart(0, "", "f"), Done("tool_calls")]).result().tool_calls[0]
    assert call.id.startswith("call_") and call.arguments() == {}


@pytest.mark.parametrize(
    "chunks",
    [
        [ToolCallArgumentsDelta(0, "{}")],
        [ToolCallStart(0, "a", "f"), ToolCallStart(0, "b", "f")],
        [ToolCallStart(0, "a", "f"), ToolCallStart(0, "a", "g")],
        [Done("stop"), TextDelta("late")],
        ["not a chunk"],
    ],
)
def test_impossible_input_raises(chunks) -> None:
    with pytest.raises(ValueError):
        feed_all(chunks)


def test_a_failed_stream_keeps_partials_but_reports_no_tool_calls() -> None:
    acc = feed_all(
        [
            TextDelta("Let me check."),
            ToolCallStart(0, "call_x", "read_file"),
            ToolCallArgumentsDelta(0, '{"path": "no'),
        ]
    )
    acc.fail(StreamTruncatedError("cut", finish_reason=None))
    result = acc.result()
    assert (
        result.text == "Let me check."
        and result.tool_calls == []
        and isinstance(result.error, StreamTruncatedError)
    )
    assert acc.unfinished_tool_calls() == [ToolCall("call_x", "read_file", '{"path": "no')]


def test_finish_reason_of_a_failed_stream_comes_from_the_error() -> None:
    acc = feed_all([TextDelta("x")])
    acc.fail(StreamTruncatedError("boom", finish_reason="error"))
    assert acc.result().finish_reason == "error"


def test_empty_stream_result() -> None:
    result = feed_all([Done(None)]).result()
    assert (result.text, result.reasoning, result.tool_calls, result.usage) == ("", None, [], None)


@pytest.mark.parametrize(("raw", "expected"), [("", {}), ("  ", {}), ("{}", {}), ('{"a": [1]}', {"a": [1]})])
def test_tool_call_arguments_parse_objects(raw: str, expected) -> None:
    assert ToolCall("c", "f", raw).arguments() == expected


@pytest.mark.parametrize("raw", ["[1]", '"x"', "null", '{"a": ', '{"a": NaN}', "{'a': 1}"])
def test_tool_call_arguments_reject_non_objects(raw: str) -> None:
    with pytest.raises(ToolArgumentsError):
        ToolCall("c", "f", raw).arguments()
    assert issubclass(ToolArgumentsError, ValueError)


def test_to_message_drops_empty_text_and_keeps_invalid_arguments_raw() -> None:
    response = AssistantResponse(
        text="",
        reasoning="why",
        tool_calls=[ToolCall("c1", "f", '{"x": 1}'), ToolCall("c2", "g", "{broken")],
        usage=None,
        finish_reason="tool_calls",
        provider_state=None,
    )
    message = response.to_message()
    assert message.role == "assistant"
    assert message.content == [
        ThinkingBlock("why"),
        ToolUseBlock("c1", "f", {"x": 1}),
        ToolUseBlock("c2", "g", {}, raw_arguments="{broken"),
    ]


def test_to_message_of_a_plain_answer() -> None:
    response = AssistantResponse("Hi", None, [], None, "stop", None)
    assert response.to_message().content == [TextBlock("Hi")]
