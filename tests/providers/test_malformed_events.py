"""Events of the wrong shape, through the real providers (read whole, per event and byte by byte).

A malformed Anthropic event or OpenAI chunk is a bad response (``http_error``, "malformed"),
never a crash or silently lost data, and so is an Anthropic ``tool_use`` started twice or
arguments for one that never started; ``null`` choices and deltas are fine. A tool call without
a name is passed on, for the agent loop to answer with an error result.
"""

from __future__ import annotations

import pytest

from providers.testing import sse_body
from tests.providers._mock_sse import MS, MSTOP, ROLE, all_modes, bd, bs, md, oc, st


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


async def test_anthropic_arguments_for_a_tool_use_that_never_started_fail_the_stream():
    body = sse_body(
        [
            (
                "message_start",
                {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3}}},
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": '{"a": 1}'},
                },
            ),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use"},
                    "usage": {"output_tokens": 2},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )
    for mode, result, _ in await all_modes(body, vendor="anthropic"):
        assert result.error is not None and "not an open tool_use" in result.error.message, mode
        assert result.tool_calls == [], mode


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
    for mode, result, _ in await all_modes(
        sse_body([MS, nameless, st(0), md("tool_use"), MSTOP]), "anthropic"
    ):
        assert result.error is None, mode
        assert [(c.id, c.name) for c in result.tool_calls] == [("t1", "")], mode
    for mode, result, _ in await all_modes(
        sse_body([MS, start, start, st(0), md("tool_use"), MSTOP]), "anthropic"
    ):
        assert result.error is not None and result.error.kind == "http_error", mode
        assert result.tool_calls == [], mode
