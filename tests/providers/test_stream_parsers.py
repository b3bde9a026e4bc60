"""Stream parser rules beyond the case files: quirks of real servers, fed event by event."""

from __future__ import annotations

import json

from providers._anthropic_stream import AnthropicStreamParser
from providers._openai_stream import OpenAIStreamParser
from providers.base import StreamAccumulator
from providers.chunks import Done, ProviderStateChunk, ReasoningDelta, TextDelta
from providers.errors import BadResponseError, ContextOverflowError, InBandError, StreamTruncatedError
from providers.sse import ServerSentEvent
from providers.testing import openai_events


def run(parser, events: list, event_name: str = "") -> tuple[StreamAccumulator, list]:
    acc = StreamAccumulator()
    chunks = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        for chunk in parser.feed(ServerSentEvent(event=event_name, data=data)):
            chunks.append(chunk)
            acc.feed(chunk)
        if parser.finished:
            break
    for chunk in parser.end():
        chunks.append(chunk)
        acc.feed(chunk)
    if parser.error is not None:
        acc.fail(parser.error)
    return acc, chunks


def delta(d: dict, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def call(index, id_=None, name=None, arguments=None) -> dict:
    fragment: dict = {"function": {}}
    if index is not None:
        fragment["index"] = index
    if id_:
        fragment["id"] = id_
    if name:
        fragment["function"]["name"] = name
    if arguments is not None:
        fragment["function"]["arguments"] = arguments
    return delta({"tool_calls": [fragment]})


def test_calls_reusing_index_zero_with_new_ids_are_separate_calls() -> None:
    events = [call(0, "a", "f", '{"x":1}'), call(0, "b", "g", '{"y":2}'), delta({}, "tool_calls"), "[DONE]"]
    calls = run(OpenAIStreamParser(), events)[0].result().tool_calls
    assert [(c.id, c.name, c.arguments()) for c in calls] == [("a", "f", {"x": 1}), ("b", "g", {"y": 2})]


def test_fragments_without_index_continue_the_last_call() -> None:
    events = [
        call(None, "a", "f", '{"x":'),
        call(None, arguments="1}"),
        call(None, "b", "g", "{}"),
        delta({}, "tool_calls"),
    ]
    calls = run(OpenAIStreamParser(), events)[0].result().tool_calls
    assert [(c.id, c.arguments_json) for c in calls] == [("a", '{"x":1}'), ("b", "{}")]


def test_arguments_before_the_id_are_kept() -> None:
    events = [call(0, arguments='{"q": '), call(0, "late", "search", '"x"}'), delta({}, "tool_calls")]
    calls = run(OpenAIStreamParser(), events)[0].result().tool_calls
    assert [(c.id, c.name, c.arguments()) for c in calls] == [("late", "search", {"q": "x"})]


def test_a_name_repeated_on_every_fragment_is_not_concatenated() -> None:
    events = [call(0, "a", "xx", "{"), call(0, "a", "xx", "}"), delta({}, "tool_calls")]
    calls = run(OpenAIStreamParser(), events)[0].result().tool_calls
    assert [(c.name, c.arguments_json) for c in calls] == [("xx", "{}")]


def test_parsed_object_arguments_are_serialised() -> None:
    events = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "a", "function": {"name": "f", "arguments": {"k": 1}}}
                        ]
                    },
                }
            ]
        },
        delta({}, "tool_calls"),
    ]
    assert run(OpenAIStreamParser(), events)[0].result().tool_calls[0].arguments() == {"k": 1}


def test_reasoning_content_wins_over_reasoning_and_details_are_never_added() -> None:
    events = [
        delta({"reasoning_content": "A", "reasoning": "A", "reasoning_details": [{"text": "A"}]}),
        delta({}, "stop"),
    ]
    assert run(OpenAIStreamParser(), events)[0].result().reasoning == "A"


def test_reasoning_content_streams_record_replay_state() -> None:
    events = [delta({"reasoning_content": "think"}), delta({"content": "hi"}, "stop")]
    acc, chunks = run(OpenAIStreamParser(provider_name="openai"), events)
    assert acc.result().provider_state == {"provider": "openai", "reasoning_field": "reasoning_content"}
    assert isinstance(chunks[-2], ProviderStateChunk) and isinstance(chunks[-1], Done)
    acc, _ = run(OpenAIStreamParser(), [delta({"reasoning": "think"}), delta({}, "stop")])
    assert acc.result().provider_state is None


def test_reasoning_precedes_content_of_the_same_delta() -> None:
    _, chunks = run(OpenAIStreamParser(), [delta({"content": "answer", "reasoning_content": "why"}, "stop")])
    assert chunks[:2] == [ReasoningDelta("why"), TextDelta("answer")]


def test_mistral_content_parts_with_thinking() -> None:
    parts = [
        {"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]},
        {"type": "text", "text": "ok"},
    ]
    result = run(OpenAIStreamParser(), [delta({"content": parts}, "stop")])[0].result()
    assert (result.reasoning, result.text) == ("hmm", "ok")


def test_eof_after_finish_reason_without_done_is_a_success() -> None:
    result = run(OpenAIStreamParser(), openai_events("hi", done=False))[0].result()
    assert result.error is None and result.finish_reason == "stop" and result.text == "hi"


def test_done_without_finish_reason_is_a_success_but_done_alone_is_an_empty_stream() -> None:
    result = run(OpenAIStreamParser(), [delta({"content": "hi"}), "[DONE]"])[0].result()
    assert result.error is None and result.finish_reason is None
    result = run(OpenAIStreamParser(), ["[DONE]"])[0].result()
    assert isinstance(result.error, BadResponseError) and result.error.retryable


def test_vllm_object_error_and_event_error_are_in_band_errors() -> None:
    vllm = {"object": "error", "message": "model crashed", "type": "InternalServerError", "code": 500}
    result = run(OpenAIStreamParser(), [delta({"content": "par"}), vllm, "[DONE]"])[0].result()
    assert (
        isinstance(result.error, InBandError) and result.error.provider_code == 500 and result.text == "par"
    )
    result = run(OpenAIStreamParser(), ["upstream exploded"], event_name="error")[0].result()
    assert isinstance(result.error, InBandError) and result.error.message == "upstream exploded"


def test_in_band_context_overflow_is_typed() -> None:
    events = [{"error": {"message": "context length exceeded", "code": "context_length_exceeded"}}]
    assert isinstance(run(OpenAIStreamParser(), events)[0].result().error, ContextOverflowError)


def test_garbage_and_non_object_events_are_skipped() -> None:
    result = run(
        OpenAIStreamParser(), [": OPENROUTER PROCESSING", "null", "[1]", delta({"content": "ok"}, "stop")]
    )[0].result()
    assert result.text == "ok" and result.error is None


def test_other_choices_are_ignored() -> None:
    events = [
        {"choices": [{"index": 1, "delta": {"content": "B"}}, {"index": 0, "delta": {"content": "A"}}]},
        delta({}, "stop"),
    ]
    assert run(OpenAIStreamParser(), events)[0].result().text == "A"


def test_think_tags_in_content_are_flushed_at_end_even_on_truncation() -> None:
    result = run(OpenAIStreamParser(), [delta({"content": "2 <"})])[0].result()
    assert result.text == "2 <" and isinstance(result.error, StreamTruncatedError)


def test_anthropic_in_band_overload_is_a_retryable_error() -> None:
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]
    result = run(AnthropicStreamParser(), events)[0].result()
    assert isinstance(result.error, InBandError) and result.error.retryable
    assert (result.error.provider_code, result.usage.input_tokens) == ("overloaded_error", 5)


def test_anthropic_message_delta_with_closed_blocks_is_enough_to_finish() -> None:
    events = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
    ]
    result = run(AnthropicStreamParser(), events)[0].result()
    assert result.error is None and result.text == "Hi" and result.finish_reason == "end_turn"


def test_anthropic_tool_input_given_whole_in_the_start_block() -> None:
    events = [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    ]
    assert run(AnthropicStreamParser(), events)[0].result().tool_calls[0].arguments() == {"a": 1}


def test_anthropic_signature_is_accumulated_not_replaced() -> None:
    events = [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "x"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "ab"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "cd"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_stop"},
    ]
    state = run(AnthropicStreamParser(), events)[0].result().provider_state
    assert state == {
        "provider": "anthropic",
        "blocks": [{"type": "thinking", "text": "x", "signature": "abcd"}],
    }
