"""The pure wire format of ``/v1`` (issue 18): request validation, deltas, chunks. No server."""

from __future__ import annotations

import json

import pytest

from conversations.api.openai_compat import wire
from conversations.api.openai_compat.wire import WireError, parse_request


def body(**fields) -> bytes:
    fields.setdefault("model", "default")
    fields.setdefault("messages", [{"role": "user", "content": "hi"}])
    return json.dumps(fields).encode()


def refused(raw: bytes) -> WireError:
    with pytest.raises(WireError) as caught:
        parse_request(raw)
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"
    assert set(caught.value.body()["error"]) == {"message", "type", "param", "code"}
    return caught.value


def test_a_request_splits_into_history_prompt_and_instructions():
    parsed = parse_request(
        body(
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {
                    "role": "developer",
                    "content": [{"type": "text", "text": "no "}, {"type": "text", "text": "emoji"}],
                },
                {"role": "user", "content": [{"type": "text", "text": "c"}]},
            ],
            stream=True,
            stream_options={"include_usage": True},
            temperature=0.2,
            user=" notes ",
        )
    )
    assert parsed.history == (("user", "a"), ("assistant", "b"))
    assert (parsed.prompt, parsed.instructions) == ("c", "be brief\n\nno emoji")
    assert parsed.stream and parsed.include_usage and parsed.user == "notes"


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"{not json", None),
        (b"[]", None),
        (b"\xff\xfe", None),
        (b'{"model": "default", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None),
        (body(model=""), "model"),
        (body(model=3), "model"),
        (body(messages=[]), "messages"),
        (body(messages="hi"), "messages"),
        (body(messages=[{"role": "assistant", "content": "x"}]), "messages"),
        (body(messages=[{"role": "user", "content": "   "}]), "messages"),
        (body(messages=[{"role": "user", "content": "x" * 32_001}]), "messages"),
        (body(messages=[{"role": "tool", "content": "x", "tool_call_id": "c"}]), "messages[0].role"),
        (body(messages=[{"role": "wizard", "content": "x"}]), "messages[0].role"),
        (body(messages=[{"role": "user", "content": [{"type": "image_url"}]}]), "messages[0].content"),
        (body(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
        (body(tools=[{"type": "function"}]), "tools"),
        (body(functions=[{"name": "f"}]), "functions"),
        (body(tool_choice="auto"), "tool_choice"),
        (body(n=2), "n"),
        (body(stream="yes"), "stream"),
        (body(stream=True, stream_options={"include_usage": "yes"}), "stream_options"),
        (body(user=7), "user"),
    ],
)
def test_bad_bodies_are_refused_naming_the_field(raw: bytes, param: str | None):
    assert refused(raw).param == param


def test_assistant_tool_calls_in_history_are_refused():
    error = refused(
        body(
            messages=[
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]},
                {"role": "user", "content": "x"},
            ]
        )
    )
    assert error.param == "messages[0].tool_calls"


def test_empty_tools_and_tool_choice_none_are_accepted():
    assert parse_request(body(tools=[], tool_choice="none", n=1)).prompt == "hi"


def test_answer_parts_join_messages_and_skip_tools():
    blocks = [
        {"type": "reasoning", "iteration": 0, "text": "think"},
        {"type": "assistant", "iteration": 0, "text": "Let me "},
        {"type": "reasoning", "iteration": 0, "text": "more"},
        {"type": "assistant", "iteration": 0, "text": "check."},
        {"type": "tool", "iteration": 0, "name": "current_time", "status": "completed"},
        {"type": "assistant", "iteration": 1, "text": "Noon."},
    ]
    assert wire.answer_parts(blocks) == ("Let me check.\n\nNoon.", "think\n\nmore")


def test_deltas_send_suffixes_and_never_take_text_back():
    tracker = wire.DeltaTracker()
    assert tracker.advance("Hel", "") == ("Hel", "")
    assert tracker.advance("Hello", "hm") == ("lo", "hm")
    assert tracker.advance("Hello", "hm") == ("", "")
    assert tracker.advance("Jello!", "hm") == ("", "")  # a rewrite: nothing until it extends again
    assert tracker.advance("Hello!", "hm") == ("!", "")
    assert tracker.diverged == 1
    assert tracker.content == "Hello!"


def test_committed_parts_and_truncation():
    rows = [
        {"role": "assistant", "content": "", "reasoning": "r1", "tool_calls": [{"id": "c"}]},
        {"role": "tool", "content": "12:00"},
        {"role": "assistant", "content": "Noon", "reasoning": None, "truncated": True},
    ]
    assert wire.committed_parts(rows) == ("Noon", "r1", True)
    assert wire.committed_parts([]) == ("", "", False)


def test_completion_and_chunks_have_openais_shape():
    done = wire.completion("chatcmpl-1", 7, "m", "hi", "", "stop", {"input_tokens": 3, "output_tokens": 2})
    assert done["object"] == "chat.completion"
    assert done["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    assert done["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert wire.usage_object(None)["total_tokens"] == 0
    steps = wire.delta_chunks("c", 7, "m", "text", "why")
    assert [list(c["choices"][0]["delta"]) for c in steps] == [["reasoning_content"], ["content"]]
    assert wire.delta_chunks("c", 7, "m", "", "") == []
    assert wire.usage_chunk("c", 7, "m", {"input_tokens": 1})["choices"] == []
    assert wire.sse_event({"a": "é"}) == 'data: {"a":"é"}\n\n'.encode()
    assert wire.SSE_DONE == b"data: [DONE]\n\n"
    assert wire.models_list(["a"]) == {
        "object": "list",
        "data": [{"id": "a", "object": "model", "created": 0, "owned_by": "picobot"}],
    }
