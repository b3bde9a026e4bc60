"""Deeply nested model JSON is refused without recursion (providers.json_depth; QA 6, item 2)."""

from __future__ import annotations

import pytest

from providers._errorbody import error_info, parse_body
from providers.json_depth import MAX_JSON_DEPTH, text_too_deep, value_too_deep
from providers.sse import event_json
from providers.types import AssistantResponse, ToolArgumentsError, ToolCall


def nested_lists(depth: int) -> str:
    return "[" * depth + "]" * depth


def nested_objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    ("text", "too_deep"),
    [
        ("{}", False),
        (nested_lists(MAX_JSON_DEPTH), False),
        (nested_lists(MAX_JSON_DEPTH + 1), True),
        ('{"a": ' + nested_lists(MAX_JSON_DEPTH - 1) + "}", False),
        ('{"a": ' + nested_lists(MAX_JSON_DEPTH) + "}", True),
        (nested_objects(MAX_JSON_DEPTH + 1), True),
        # Brackets inside strings (escaped quotes too) do not count.
        ('{"s": "' + "[" * 500 + '\\"' + "{" * 500 + '"}', False),
        ("[" * 100_000, True),  # not JSON at all: still answered, without recursion
    ],
)
def test_text_too_deep_counts_brackets_outside_strings(text, too_deep):
    assert text_too_deep(text) is too_deep


def test_value_too_deep_walks_iteratively_and_catches_cycles():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    cycle: dict = {}
    cycle["self"] = cycle

    assert value_too_deep(deep) is True
    assert value_too_deep({"a": [{"b": 1}]}) is False
    assert value_too_deep(cycle) is True
    assert value_too_deep("text") is False


@pytest.mark.parametrize("depth", [65, 300, 900, 5000, 100_000])
@pytest.mark.parametrize("shape", [lambda d: '{"a": ' + nested_lists(d) + "}", nested_objects])
def test_deeply_nested_tool_arguments_are_invalid_arguments(depth, shape):
    call = ToolCall("c1", "ok", shape(depth))

    with pytest.raises(ToolArgumentsError, match=f"nest deeper than {MAX_JSON_DEPTH} levels"):
        call.arguments()
    block = AssistantResponse("", None, [call], None, "tool_calls", None).to_message().tool_calls[0]
    assert (block.arguments, block.raw_arguments) == ({}, call.arguments_json)


def test_arguments_at_the_limit_still_parse():
    text = nested_objects(MAX_JSON_DEPTH)
    assert ToolCall("c1", "ok", text).arguments()["a"]["a"]


def test_a_stream_event_too_deep_for_the_decoder_is_not_json():
    with pytest.raises(ValueError, match="nests too deeply"):
        event_json(nested_lists(100_000))


def test_a_deeply_nested_error_body_is_read_without_recursion():
    value, is_json = parse_body(nested_lists(100_000).encode())
    assert is_json is False

    message: object = "deep"
    for _ in range(900):
        message = {"m": message}
    assert error_info({"error": {"message": message, "code": "x"}}) == ("(a nested error message)", "x")
