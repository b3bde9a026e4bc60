"""History rows → provider input (pure; no database)."""

from __future__ import annotations

import logging

from hypothesis import given
from hypothesis import strategies as st

from conversations.context.history import (
    INTERRUPTED_RESULT,
    build_turn_input,
    repair_tool_pairs,
    row_to_message,
)
from providers.blocks import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from providers.messages import Message


def user(content: str) -> dict:
    return {"role": "user", "content": content}


def assistant(content: str = "", calls: list[tuple[str, str]] = (), **extra: object) -> dict:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"id": i, "name": n, "arguments": {}} for i, n in calls],
        **extra,
    }


def tool(call_id: str, content: str = "ok", name: str = "current_time") -> dict:
    return {"role": "tool", "content": content, "tool_call_id": call_id, "tool_name": name}


def result_id(message: Message) -> str:
    block = message.content[0]
    assert isinstance(block, ToolResultBlock)
    return block.tool_call_id


# --- build_turn_input -----------------------------------------------------------------------------


def test_the_turn_input_starts_with_exactly_one_system_message():
    messages = build_turn_input("You are PicoBot.", [user("hi"), assistant("hello"), user("again")])

    assert [m.role for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0] == Message.system("You are PicoBot.")


def test_the_summary_goes_into_the_system_message_not_a_new_message():
    messages = build_turn_input("Prompt.", [user("hi")], summary="We talked about tea.")

    assert [m.role for m in messages] == ["system", "user"]
    assert messages[0].text == "Prompt.\n\nSummary of the earlier conversation:\nWe talked about tea."


def test_runtime_context_is_appended_only_to_the_last_user_message():
    rows = [user("first"), assistant("a1"), user("second"), assistant("a2"), user("third")]

    messages = build_turn_input("S", rows, runtime_context="time=10:42")

    assert [m.text for m in messages] == [
        "S",
        "first",
        "a1",
        "second",
        "a2",
        "third\n\n[Runtime context: time=10:42]",
    ]


def test_runtime_context_goes_to_the_last_user_message_even_when_tool_rows_follow_it():
    rows = [user("earlier"), user("now"), assistant("", [("c1", "current_time")]), tool("c1", "10:42")]

    messages = build_turn_input("S", rows, runtime_context="ctx")

    assert [m.role for m in messages] == ["system", "user", "user", "assistant", "tool"]
    assert messages[1].text == "earlier"
    assert messages[2].text == "now\n\n[Runtime context: ctx]"


def test_without_runtime_context_user_messages_are_unchanged():
    messages = build_turn_input("S", [user("only")])

    assert messages[1] == Message.user("only")


def test_the_rows_given_are_not_mutated():
    rows = [user("hi")]
    build_turn_input("S", rows, runtime_context="ctx")

    assert rows == [user("hi")]


# --- row_to_message -------------------------------------------------------------------------------


def test_an_assistant_row_becomes_reasoning_text_and_tool_calls_in_order():
    row = assistant("Let me look.", [("c1", "current_time")], reasoning="thinking")

    message = row_to_message(row)

    assert message.content == [
        ThinkingBlock("thinking"),
        TextBlock("Let me look."),
        ToolUseBlock("c1", "current_time", {}),
    ]


def test_a_tool_row_becomes_a_tool_result_with_its_call_id_and_error_flag():
    message = row_to_message({**tool("c9", "Error: nope"), "is_error": True})

    assert message.content == [ToolResultBlock("c9", "Error: nope", True, "current_time")]


def test_an_assistant_row_that_carries_nothing_is_skipped():
    assert row_to_message(assistant("")) is None
    assert row_to_message(assistant("   ")) is None


def test_reasoning_alone_is_not_sent_back_and_a_stopped_tool_call_keeps_its_row():
    """A stopped turn keeps its reasoning without text (``completion_status: cancelled``): no
    vendor takes an assistant message of reasoning alone, so the request leaves it out; a row
    with tool calls and no text still goes (its calls need their results)."""
    thinking = assistant("", reasoning="Let me think", completion_status="cancelled")
    state = {"blocks": [{"type": "thinking", "text": "Let me think", "signature": "sig"}]}
    signed = assistant("", reasoning="Let me think", provider_state=state, completion_status="cancelled")
    calling = assistant("", [("c1", "gate")], reasoning="I need the gate", completion_status="cancelled")

    assert row_to_message(thinking) is None and row_to_message(signed) is None
    messages = build_turn_input(
        "S", [user("think"), thinking, user("open it"), calling, tool("c1", "stopped", "gate"), user("next")]
    )
    assert [m.role for m in messages] == ["system", "user", "user", "assistant", "tool", "user"]
    assert messages[3].tool_calls == [ToolUseBlock("c1", "gate", {})]


def test_a_corrupt_provider_state_is_ignored_without_raising(caplog):
    with caplog.at_level(logging.WARNING, logger="conversations.context.history"):
        message = row_to_message(assistant("fine", reasoning="r", provider_state="not a dict", id="m-1"))

    assert message.content == [ThinkingBlock("r"), TextBlock("fine")]
    assert message.provider_state is None
    assert "corrupt provider_state" in caplog.text


def test_a_provider_state_with_corrupt_blocks_falls_back_to_the_plain_reasoning():
    state = {"provider": "anthropic", "blocks": [{"type": "thinking"}]}  # "text" missing

    message = row_to_message(assistant("fine", reasoning="r", provider_state=state))

    assert message.content == [ThinkingBlock("r"), TextBlock("fine")]


def test_a_valid_provider_state_replays_its_signed_thinking_blocks():
    state = {"provider": "anthropic", "blocks": [{"type": "thinking", "text": "r", "signature": "sig"}]}

    message = row_to_message(assistant("fine", reasoning="r", provider_state=state))

    assert message.content == [ThinkingBlock("r", "sig"), TextBlock("fine")]
    assert message.provider_state == state


def test_history_with_a_corrupt_provider_state_still_builds_a_request():
    rows = [user("hi"), assistant("hello", provider_state=["garbage"]), user("again")]

    messages = build_turn_input("S", rows)

    assert [m.text for m in messages] == ["S", "hi", "hello", "again"]


# --- repair_tool_pairs ----------------------------------------------------------------------------


def test_a_call_without_a_result_gets_an_interrupted_error_result():
    call = Message.assistant("", tool_calls=[ToolUseBlock("c1", "current_time", {})])

    repaired = repair_tool_pairs([Message.user("hi"), call, Message.user("next")])

    assert repaired == [
        Message.user("hi"),
        call,
        Message.tool_result("c1", INTERRUPTED_RESULT, is_error=True, tool_name="current_time"),
        Message.user("next"),
    ]


def test_only_the_missing_result_of_several_calls_is_filled_in_call_order():
    calls = Message.assistant(
        "", tool_calls=[ToolUseBlock("c1", "a", {}), ToolUseBlock("c2", "b", {}), ToolUseBlock("c3", "c", {})]
    )
    r3 = Message.tool_result("c3", "three", tool_name="c")
    r1 = Message.tool_result("c1", "one", tool_name="a")

    repaired = repair_tool_pairs([calls, r3, r1])

    assert repaired == [
        calls,
        r1,
        Message.tool_result("c2", INTERRUPTED_RESULT, is_error=True, tool_name="b"),
        r3,
    ]


def test_orphaned_tool_results_are_dropped_and_order_is_kept():
    u1, a1, u2 = Message.user("u1"), Message.assistant("a1"), Message.user("u2")
    call = Message.assistant("", tool_calls=[ToolUseBlock("c1", "t", {})])
    good = Message.tool_result("c1", "ok", tool_name="t")

    repaired = repair_tool_pairs(
        [
            Message.tool_result("x0", "orphan at the start"),
            u1,
            a1,
            Message.tool_result("x1", "orphan after a plain answer"),
            u2,
            call,
            Message.tool_result("x2", "result of an unknown call"),
            good,
        ]
    )

    assert repaired == [u1, a1, u2, call, good]


def test_a_second_result_for_the_same_call_is_dropped():
    call = Message.assistant("", tool_calls=[ToolUseBlock("c1", "t", {})])
    first, second = Message.tool_result("c1", "first"), Message.tool_result("c1", "second")

    assert repair_tool_pairs([call, first, second]) == [call, first]


def test_a_well_formed_history_is_unchanged():
    history = [
        Message.user("hi"),
        Message.assistant("", tool_calls=[ToolUseBlock("c1", "t", {}), ToolUseBlock("c2", "t", {})]),
        Message.tool_result("c1", "1"),
        Message.tool_result("c2", "2"),
        Message.assistant("done"),
    ]

    assert repair_tool_pairs(history) == history


# --- property -------------------------------------------------------------------------------------

CALL_IDS = st.sampled_from(["c1", "c2", "c3", "c4", ""])


@st.composite
def history_rows(draw: st.DrawFn) -> list[dict]:
    rows: list[dict] = []
    for kind in draw(st.lists(st.sampled_from(["user", "assistant", "tool"]), max_size=14)):
        if kind == "user":
            rows.append(user(draw(st.text(max_size=3))))
        elif kind == "assistant":
            ids = draw(st.lists(CALL_IDS, max_size=3, unique=True))
            rows.append(assistant(draw(st.sampled_from(["", "text"])), [(i, "t") for i in ids]))
        else:
            rows.append(tool(draw(CALL_IDS)))
    return rows


@given(history_rows())
def test_every_repaired_tool_call_is_followed_by_exactly_its_results_and_nothing_is_orphaned(rows):
    messages = build_turn_input("S", rows)[1:]

    i = 0
    while i < len(messages):
        message = messages[i]
        assert message.role != "tool", f"orphaned tool message at {i}"
        i += 1
        if message.role == "assistant" and message.tool_calls:
            expected = [call.id for call in message.tool_calls]
            got = [result_id(m) for m in messages[i : i + len(expected)] if m.role == "tool"]
            assert got == expected
            i += len(expected)
    kept = [r for r in rows if r["role"] != "tool" and row_to_message(r) is not None]
    assert [m.role for m in messages if m.role != "tool"] == [r["role"] for r in kept]
