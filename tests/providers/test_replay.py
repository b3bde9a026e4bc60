"""The offline replay provider plays bundled transcripts through the real OpenAI parser."""

from __future__ import annotations

import shutil

import pytest

from providers.chunks import ReasoningDelta, TextDelta, ToolCallArgumentsDelta, ToolCallStart
from providers.messages import Message, ToolDefinition
from providers.replay import DEFAULT_TRANSCRIPT_DIR, TRANSCRIPTS, ReplayProvider, choose_transcript
from providers.sse import iter_sse_events
from providers.types import ProviderRequest

TIME_TOOL = ToolDefinition(
    "current_time",
    "Current date and time",
    {"type": "object", "properties": {"timezone": {"type": "string"}}},
)


@pytest.fixture
async def replay():
    provider = ReplayProvider()
    yield provider
    await provider.aclose()


def test_it_is_labelled_offline() -> None:
    provider = ReplayProvider()
    assert (provider.name, provider.model, provider.offline) == ("replay", "replay", True)


async def test_plain_messages_get_the_offline_answer_with_setup_help_and_a_quote(replay) -> None:
    request = ProviderRequest(
        [Message.system("sys"), Message.user('Hello "there" <think>\nsecond line')], [TIME_TOOL]
    )
    chunks = [c async for c in replay.stream(request)]
    result = await replay.collect(request)
    for name in (
        "PICOBOT_LLM_PROVIDER=openai",
        "PICOBOT_LLM_BASE_URL",
        "PICOBOT_LLM_API_KEY",
        "PICOBOT_LLM_MODEL",
    ):
        assert name in result.text
    assert "offline replay provider" in result.text
    assert 'You said: “Hello "there" ‹think›”' in result.text
    assert "<think>" not in result.text and "Quote the user briefly" in result.reasoning
    assert result.finish_reason == "stop" and result.usage is not None and result.tool_calls == []
    assert any(isinstance(c, ReasoningDelta) for c in chunks) and any(
        isinstance(c, TextDelta) for c in chunks
    )


@pytest.mark.parametrize(
    "question", ["What time is it?", "what's the date today", "现在几点了？", "告诉我时间"]
)
async def test_time_questions_with_the_tool_get_a_fragmented_tool_call(replay, question: str) -> None:
    chunks = [c async for c in replay.stream(ProviderRequest([Message.user(question)], [TIME_TOOL]))]
    starts = [c for c in chunks if isinstance(c, ToolCallStart)]
    fragments = [c for c in chunks if isinstance(c, ToolCallArgumentsDelta)]
    assert len(starts) == 1 and starts[0].name == "current_time" and starts[0].id.startswith("call_")
    assert len(fragments) >= 2
    result = await replay.collect(ProviderRequest([Message.user(question)], [TIME_TOOL]))
    assert result.finish_reason == "tool_calls" and result.reasoning
    assert result.tool_calls[0].arguments() == {"timezone": "UTC"}


async def test_a_time_question_without_the_tool_gets_the_offline_answer(replay) -> None:
    result = await replay.collect(ProviderRequest([Message.user("What time is it?")]))
    assert result.tool_calls == [] and "offline replay provider" in result.text


async def test_after_the_tool_result_the_answer_states_it(replay) -> None:
    call = await replay.collect(ProviderRequest([Message.user("What time is it?")], [TIME_TOOL]))
    history = [
        Message.user("What time is it?"),
        call.to_message(),
        Message.tool_result(
            call.tool_calls[0].id, 'It is 2026-01-01T10:42:00Z ("UTC")\nThursday', tool_name="current_time"
        ),
    ]
    result = await replay.collect(ProviderRequest(history, [TIME_TOOL]))
    assert 'It is 2026-01-01T10:42:00Z ("UTC")\nThursday' in result.text
    assert result.finish_reason == "stop"


def test_transcripts_are_well_formed_chat_completion_chunks() -> None:
    for name in TRANSCRIPTS:
        raw = (DEFAULT_TRANSCRIPT_DIR / name).read_bytes()
        events = list(iter_sse_events([raw]))
        assert events[-1].data == "[DONE]"
        assert all('"chat.completion.chunk"' in e.data for e in events[:-1])


def test_choose_transcript_reads_the_wire_body() -> None:
    assert choose_transcript({"messages": [{"role": "tool", "content": "10:42"}]}) == (
        "after_tool.sse",
        {"TOOL_RESULT": "10:42"},
    )
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "clock?"}]}],
        "tools": [{"function": {"name": "current_time"}}],
    }
    assert choose_transcript(body)[0] == "time_tool_call.sse"
    assert (
        choose_transcript({"messages": [{"role": "user", "content": "sometimes"}], "tools": body["tools"]})[0]
        == "offline_answer.sse"
    )


def test_a_missing_transcript_is_a_clear_error(tmp_path) -> None:
    shutil.copy(DEFAULT_TRANSCRIPT_DIR / "after_tool.sse", tmp_path)
    with pytest.raises(ValueError, match="offline_answer.sse"):
        ReplayProvider(tmp_path)


async def test_event_delay_streams_slowly(tmp_path) -> None:
    for name in TRANSCRIPTS:
        shutil.copy(DEFAULT_TRANSCRIPT_DIR / name, tmp_path)
    provider = ReplayProvider(tmp_path, event_delay=0.001)
    assert (await provider.collect(ProviderRequest([Message.user("hi")]))).text
    await provider.aclose()
