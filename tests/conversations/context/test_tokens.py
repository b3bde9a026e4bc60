"""Token estimates (``conversations.context.tokens``; seed 002 Task 6 §6a–§6b): pure, no database."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from conversations.context.tokens import (
    ASCII_CHARS_PER_TOKEN,
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    REQUEST_OVERHEAD,
    TOOL_RESULT_OVERHEAD,
    TOOL_USE_OVERHEAD,
    estimate_block,
    estimate_message,
    estimate_messages,
    estimate_request,
    estimate_text,
    estimate_tools,
)
from providers.blocks import (
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from providers.messages import Message, ToolDefinition


def test_ascii_text_counts_three_and_a_half_characters_per_token_rounded_up():
    assert estimate_text("") == 0
    assert estimate_text("a") == 1
    assert estimate_text("x" * 350) == 100
    assert estimate_text("x" * 351) == 101
    assert ASCII_CHARS_PER_TOKEN == 3.5


def test_english_prose_is_over_counted_not_under_counted():
    # cl100k_base and o200k_base both cut this sentence into 10 tokens.
    assert estimate_text("The quick brown fox jumps over the lazy dog.") >= 10


def test_cjk_characters_count_one_token_each():
    assert estimate_text("你好世界") == 4
    assert estimate_text("こんにちは") == 5  # hiragana
    assert estimate_text("カタカナ") == 4  # katakana
    assert estimate_text("안녕하세요") == 5  # Hangul syllables
    assert estimate_text("，。！？") == 4  # full-width and CJK punctuation
    assert estimate_text("𠀀𠀁") == 2  # extension B, outside the BMP
    # Mixed: 8 ASCII characters (8 / 3.5 ≈ 2.3) and 5 Han characters, rounded up once.
    assert estimate_text("PicoBot 是一个网关") == 8


def test_other_scripts_count_half_a_token_per_character_and_emoji_two():
    assert estimate_text("Привет") == 3  # 6 Cyrillic characters
    assert estimate_text("😀😀😀") == 6
    assert estimate_text("café") == 2  # 3 ASCII (0.86) + 1 accented (0.5) → 1.36 → 2


def test_cjk_text_is_never_estimated_below_its_character_count():
    text = "上下文压缩在对话很长时自动进行。" * 20
    assert estimate_text(text) >= len(text)


@given(st.text(max_size=200), st.text(max_size=200))
def test_the_text_estimate_grows_with_the_text_and_is_subadditive(a, b):
    assert estimate_text(a + b) >= estimate_text(a)
    assert estimate_text(a + b) <= estimate_text(a) + estimate_text(b) + 1


def test_blocks():
    assert estimate_block(TextBlock("x" * 35)) == 10
    assert estimate_block(ThinkingBlock("x" * 35, signature="sig" * 100)) == 10  # the signature is not text
    assert estimate_block(RedactedThinkingBlock("x" * 35)) == 10
    assert estimate_block(ImageBlock("image/png", "A" * 100_000)) == IMAGE_TOKENS  # fixed, whatever its size
    result = ToolResultBlock("call_1", "x" * 70, is_error=True)
    assert estimate_block(result) == TOOL_RESULT_OVERHEAD + 20


def test_a_tool_call_counts_its_name_and_its_json_arguments():
    arguments = {"query": "weather in Kyoto", "days": 3}
    call = ToolUseBlock("call_1", "search", arguments)
    expected = (
        TOOL_USE_OVERHEAD
        + estimate_text("search")
        + estimate_text(json.dumps(arguments, separators=(",", ":")))
    )
    assert estimate_block(call) == expected
    raw = ToolUseBlock("call_2", "search", {}, raw_arguments="{not json" + "x" * 100)
    assert estimate_block(raw) == TOOL_USE_OVERHEAD + estimate_text("search") + estimate_text(
        raw.raw_arguments
    )


def test_messages_add_a_role_overhead_each():
    user = Message.user("x" * 35)
    assert estimate_message(user) == MESSAGE_OVERHEAD + 10
    assert estimate_message(Message.user("")) == MESSAGE_OVERHEAD
    messages = [Message.system("y" * 7), user, Message.tool_result("c", "z" * 7)]
    assert estimate_messages(messages) == sum(estimate_message(m) for m in messages)
    assert estimate_messages(messages) == 3 * MESSAGE_OVERHEAD + 2 + 10 + TOOL_RESULT_OVERHEAD + 2


def test_a_request_counts_its_tool_definitions():
    messages = [Message.system("s"), Message.user("hi")]
    tool = ToolDefinition("current_time", "The current time.", {"type": "object", "properties": {}})
    assert estimate_request(messages) == REQUEST_OVERHEAD + estimate_messages(messages)
    assert estimate_request(messages, [tool]) == estimate_request(messages) + estimate_tools([tool])
    assert estimate_tools([tool]) > 0
