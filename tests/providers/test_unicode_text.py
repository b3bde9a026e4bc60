"""Lone surrogates and NUL out of model text: the pure repairs (providers.unicode_text), the
stream parsers' input, tool call arguments and the provider request body (QA 6, item 1)."""

from __future__ import annotations

import json

import pytest

from providers._http import json_body
from providers.base import StreamAccumulator
from providers.chunks import (
    Done,
    ProviderStateChunk,
    ReasoningDelta,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
    UsageChunk,
)
from providers.errors import AuthenticationError
from providers.messages import Usage
from providers.types import ToolCall
from providers.unicode_text import (
    SurrogateMender,
    fix_surrogates,
    map_strings,
    mend_error,
    scrub_text,
    scrub_value,
)

EMOJI = "\U0001f600"  # 😀 = "\ud83d\ude00" in UTF-16


@pytest.mark.parametrize(
    ("text", "fixed"),
    [
        ("plain ascii", "plain ascii"),
        ("中文 and " + EMOJI, "中文 and " + EMOJI),
        ("smile \ud83d\ude00", "smile " + EMOJI),  # a pair json.loads made of two escapes
        ("\ud800", "\ufffd"),
        ("a\udc00b", "a\ufffdb"),
        ("\ude00\ud83d", "\ufffd\ufffd"),  # wrong order: two lone halves
        ("\ud83d\ud83d\ude00", "\ufffd" + EMOJI),
        ("", ""),
    ],
)
def test_fix_surrogates_rejoins_pairs_and_replaces_lone_halves(text, fixed):
    assert fix_surrogates(text) == fixed
    fix_surrogates(text).encode("utf-8")  # always encodable


def test_fix_surrogates_returns_clean_text_itself():
    text = "nothing to repair: 中文 " + EMOJI
    assert fix_surrogates(text) is text


def test_scrub_text_replaces_nul_and_lone_surrogates():
    assert scrub_text("a\x00b\ud800c\ud83d\ude00") == "a\ufffdb\ufffdc" + EMOJI


def test_scrub_value_cleans_keys_and_values_in_nested_json_without_mutating_it():
    value = {"k\x00": ["\ud800", {"x": "\ud83d\ude00", "n": 1, "none": None}], "ok": True}
    cleaned = scrub_value(value)

    assert cleaned == {"k\ufffd": ["\ufffd", {"x": EMOJI, "n": 1, "none": None}], "ok": True}
    assert value["k\x00"][0] == "\ud800"
    json.dumps(cleaned, ensure_ascii=False).encode("utf-8")


def test_map_strings_walks_a_value_nested_ten_thousand_deep_without_recursion():
    deep: list = ["\ud800"]
    for _ in range(10_000):
        deep = [deep]
    cleaned = map_strings(deep, fix_surrogates)
    for _ in range(10_000):
        cleaned = cleaned[0]
    assert cleaned == ["\ufffd"]


def mend_all(chunks: list) -> list:
    mender = SurrogateMender()
    out = []
    for chunk in chunks:
        if isinstance(chunk, Done):
            out += mender.finish()
        mended = mender.mend(chunk)
        if mended is not None:
            out.append(mended)
    return out


def text_of(chunks: list, kind: type = TextDelta) -> str:
    return "".join(c.text for c in chunks if isinstance(c, kind))


@pytest.mark.parametrize("cut", range(1, 9))
def test_a_pair_split_across_text_deltas_is_rejoined_wherever_the_stream_is_cut(cut):
    units = list("ab\ud83d\ude00cd\ud83d\ude00")
    chunks = [TextDelta("".join(units[:cut])), TextDelta("".join(units[cut:])), Done("stop")]
    chunks = [c for c in chunks if not isinstance(c, TextDelta) or c.text]

    assert text_of(mend_all(chunks)) == "ab" + EMOJI + "cd" + EMOJI


def test_each_delta_is_mended_on_its_own_kind_and_a_half_left_at_the_end_is_replaced():
    chunks = [
        ReasoningDelta("think \ud83d"),
        TextDelta("say \ud83d"),
        ToolCallStart(0, "c1", "echo"),
        ToolCallArgumentsDelta(0, '{"q": "\ud83d'),
        ReasoningDelta("\ude00"),
        TextDelta("\ude00 \ud800!"),
        ToolCallArgumentsDelta(0, '\ude00"}'),
        ToolCallArgumentsDelta(1, "\ud83d"),  # never completed
        UsageChunk(Usage(1, 1)),
        Done("stop"),
    ]
    out = mend_all(chunks)

    assert text_of(out, ReasoningDelta) == "think " + EMOJI
    assert text_of(out) == "say " + EMOJI + " \ufffd!"
    assert (
        "".join(c.delta for c in out if isinstance(c, ToolCallArgumentsDelta) and c.index == 0)
        == '{"q": "' + EMOJI + '"}'
    )
    assert [c.delta for c in out if isinstance(c, ToolCallArgumentsDelta) and c.index == 1] == ["\ufffd"]
    assert isinstance(out[-1], Done)


def test_ascii_deltas_pass_through_as_the_same_objects():
    chunk = TextDelta("hello")
    assert SurrogateMender().mend(chunk) is chunk


@pytest.mark.parametrize(
    ("chunk", "mended"),
    [
        (ToolCallStart(0, "call_\ud800", "plan\udc00"), ToolCallStart(0, "call_\ufffd", "plan\ufffd")),
        (ToolCallStart(1, "", "\ud83d\ude00"), ToolCallStart(1, "", EMOJI)),
        (Done("stop\ud800"), Done("stop\ufffd")),
        (
            ProviderStateChunk({"provider": "x", "blocks": [{"signature": "s\udc00", "k\ud800": 1}]}),
            ProviderStateChunk({"provider": "x", "blocks": [{"signature": "s\ufffd", "k\ufffd": 1}]}),
        ),
    ],
)
def test_every_string_of_a_whole_chunk_is_mended(chunk, mended):
    """QA 6b, B1: a tool call's id and name (and the other whole strings) reached the live
    snapshot raw, and the WebSocket closed 1011 (UnicodeEncodeError)."""
    out = SurrogateMender().mend(chunk)
    assert out == mended
    json.dumps(repr(out), ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(
    "chunk",
    [
        ToolCallStart(0, "call_1", "plan"),
        Done("stop"),
        Done(None),
        UsageChunk(Usage(1, 2)),
        ProviderStateChunk({"a": "b"}),
    ],
)
def test_clean_whole_chunks_pass_through(chunk):
    assert SurrogateMender().mend(chunk) == chunk


def test_a_repeated_start_of_the_same_call_mends_to_the_same_id_so_the_call_stays_one():
    mender, acc = SurrogateMender(), StreamAccumulator()
    for chunk in [
        ToolCallStart(0, "call_\ud800", ""),
        ToolCallStart(0, "call_\ud800", "plan\udc00"),
        ToolCallArgumentsDelta(0, "{}"),
        Done("tool_calls"),
    ]:
        acc.feed(mender.mend(chunk))
    assert acc.result().tool_calls == [ToolCall("call_\ufffd", "plan\ufffd", "{}")]


def test_a_provider_errors_strings_are_mended_in_place():
    error = AuthenticationError(
        "bad key \ud800 here", http_status=401, provider_code={"code": "x\udc00"}, finish_reason="stop\ud83d"
    )
    assert mend_error(error) is error
    assert (error.message, str(error), error.provider_code, error.finish_reason) == (
        "bad key \ufffd here",
        "bad key \ufffd here",
        {"code": "x\ufffd"},
        "stop\ufffd",
    )


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"q": "\\ud800"}', {"q": "\ufffd"}),
        ('{"q": "\\uD83D\\uDE00", "\\udc00k": ["x\\ud800"]}', {"q": EMOJI, "\ufffdk": ["x\ufffd"]}),
        ('{"q": "fine \\u00e9"}', {"q": "fine é"}),
    ],
)
def test_tool_call_arguments_hold_no_lone_surrogate(arguments, expected):
    assert ToolCall("c1", "echo", arguments).arguments() == expected


def test_a_split_pair_in_streamed_tool_arguments_parses_to_the_character():
    acc = StreamAccumulator()
    for chunk in mend_all(
        [
            ToolCallStart(0, "c1", "echo"),
            ToolCallArgumentsDelta(0, '{"q": "\ud83d'),
            ToolCallArgumentsDelta(0, '\ude00"}'),
            Done("tool_calls"),
        ]
    ):
        acc.feed(chunk)
    assert acc.result().tool_calls[0].arguments() == {"q": EMOJI}


def test_a_request_body_with_lone_surrogates_is_still_sent_as_utf8_json():
    body = {"messages": [{"role": "user", "content": "plan: step \ud800 and \ud83d\ude00"}]}
    sent = json_body(body)

    assert json.loads(sent) == {"messages": [{"role": "user", "content": "plan: step \ufffd and " + EMOJI}]}


def test_a_clean_request_body_is_encoded_like_httpx_json():
    body = {"model": "m", "messages": [{"role": "user", "content": "héllo 中文"}], "stream": True}
    assert json_body(body) == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def test_the_accumulator_joins_split_pairs_for_every_consumer_of_a_whole_response():
    acc = StreamAccumulator()
    for chunk in [
        ReasoningDelta("r \ud83d"),
        ReasoningDelta("\ude00"),
        TextDelta("t \ud83d"),
        TextDelta("\ude00 \ud800"),
        Done("stop"),
    ]:
        acc.feed(chunk)

    assert (acc.result().reasoning, acc.result().text) == ("r " + EMOJI, "t " + EMOJI + " \ufffd")


def test_map_strings_can_leave_keys_alone():
    value = {"k\ud800": ["a\ud800", {"n\ud800": "b"}]}
    assert map_strings(value, fix_surrogates) == {"k\ufffd": ["a\ufffd", {"n\ufffd": "b"}]}
    assert map_strings(value, fix_surrogates, keys=False) == {"k\ud800": ["a\ufffd", {"n\ud800": "b"}]}
