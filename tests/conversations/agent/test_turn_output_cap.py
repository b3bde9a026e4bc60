"""The per-turn output cap (``PICOBOT_MAX_TURN_OUTPUT_CHARS``; QA 6c).

A server that ignores ``max_tokens`` streamed a 10 MB answer: every snapshot and the
``turn_committed`` frame outgrew the WebSocket's 9 MiB payload limit and every socket of the chat
was closed. The turn's text + reasoning (all iterations) is now capped: the part that fits is
shown and kept as ``interrupted`` (seed 003 §14.2), the stream is closed, and the user reads a
short message saying the answer was cut off.
"""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from conversations.agent.failures import TurnFailure, TurnFailurePresenter
from conversations.agent.loop import AgentLoop
from conversations.agent.tool_registry import Tool, ToolRegistry
from conversations.models import Message as MessageRow
from delivery.events import ReasoningDelta, TextDelta
from providers.chunks import Done
from providers.chunks import ReasoningDelta as ReasoningChunk
from providers.chunks import TextDelta as TextChunk
from providers.errors import ResponseTooLongError
from providers.messages import Message
from providers.testing import ScriptedProvider, script_text, script_tool_call
from tests.conversations.conftest import make_token

INPUT = [Message.system("You are PicoBot."), Message.user("Talk a lot.")]


class Recorder(list):
    def __call__(self, event: object) -> None:
        self.append(event)


class Counted:
    """A scripted response that counts how many of its chunks the loop pulled."""

    def __init__(self, chunks: list) -> None:
        self.chunks = chunks
        self.pulled = 0

    def __iter__(self):
        for chunk in self.chunks:
            self.pulled += 1
            yield chunk


async def noop(arguments: dict) -> str:
    return "done"


def shown(events: list, kind: type) -> str:
    return "".join(e.delta for e in events if isinstance(e, kind))


async def test_a_delta_past_the_cap_is_cut_to_what_fits_and_the_stream_is_not_read_further():
    response = Counted(
        [TextChunk("abcd"), TextChunk("efgh"), TextChunk("ijkl"), TextChunk("mnop"), Done("stop")]
    )
    events = Recorder()
    agent = AgentLoop(ScriptedProvider([response]), ToolRegistry([]), events, max_output_chars=10)

    result = await agent.run(INPUT)

    assert isinstance(result.error, ResponseTooLongError) and result.error.max_chars == 10
    assert not result.error.retryable
    assert shown(events, TextDelta) == "abcdefghij"
    assert result.partial is not None and result.partial.message.text == "abcdefghij"
    assert result.messages == []
    assert response.pulled == 3, "the chunks after the one that passed the cap were never read"


async def test_an_answer_of_exactly_the_cap_completes():
    agent = AgentLoop(
        ScriptedProvider([[TextChunk("abcde"), TextChunk("fghij"), Done("stop")]]),
        ToolRegistry([]),
        Recorder(),
        max_output_chars=10,
    )

    result = await agent.run(INPUT)

    assert result.error is None and result.final_text == "abcdefghij"


async def test_the_cap_counts_the_whole_turn_across_iterations():
    first = [TextChunk("Let me check. "), *script_tool_call("call_1", "noop", {})]  # 14 characters
    provider = ScriptedProvider([first, [TextChunk("0123456789"), Done("stop")]])
    events = Recorder()
    agent = AgentLoop(
        provider, ToolRegistry([Tool("noop", "noop", {"type": "object"}, noop)]), events, max_output_chars=20
    )

    result = await agent.run(INPUT)

    assert isinstance(result.error, ResponseTooLongError)
    assert [(m.iteration, m.message.role) for m in result.messages] == [(0, "assistant"), (0, "tool")]
    assert result.messages[0].message.text == "Let me check. "
    assert result.partial is not None and result.partial.iteration == 1
    assert result.partial.message.text == "012345"  # 20 - 14 characters of the second answer
    assert shown(events, TextDelta) == "Let me check. 012345"


async def test_reasoning_counts_toward_the_cap():
    provider = ScriptedProvider(
        [[ReasoningChunk("r" * 8), TextChunk("abcdef"), TextChunk("never"), Done("stop")]]
    )
    events = Recorder()
    agent = AgentLoop(provider, ToolRegistry([]), events, max_output_chars=10)

    result = await agent.run(INPUT)

    assert isinstance(result.error, ResponseTooLongError)
    assert shown(events, ReasoningDelta) == "r" * 8 and shown(events, TextDelta) == "ab"
    assert result.partial is not None
    assert result.partial.message.text == "ab" and result.partial.message.reasoning == "r" * 8


async def test_reasoning_alone_past_the_cap_keeps_no_partial():
    provider = ScriptedProvider([[ReasoningChunk("r" * 8), ReasoningChunk("r" * 8), Done("stop")]])
    events = Recorder()
    agent = AgentLoop(provider, ToolRegistry([]), events, max_output_chars=10)

    result = await agent.run(INPUT)

    assert isinstance(result.error, ResponseTooLongError)
    assert shown(events, ReasoningDelta) == "r" * 10
    assert result.partial is None and result.shown_before_error  # §14.1: reasoning alone is no answer


async def test_the_presenter_says_the_answer_was_cut_off_at_the_cap():
    failure = TurnFailure.provider(ResponseTooLongError("over", max_chars=1_000_000))

    text = TurnFailurePresenter().present(failure)

    assert (
        text
        == f"The answer and its reasoning were longer than 1000000 characters and were cut off (ref {failure.ref})."
    )


@database_sync_to_async
def stored_rows() -> list[tuple[str, str, str]]:
    return list(MessageRow.objects.order_by("seq").values_list("role", "content", "completion_status"))


@pytest.mark.django_db(transaction=True)
async def test_a_long_answer_is_cut_at_the_cap_kept_interrupted_and_the_next_turn_works(
    connect, start_worker, settings
):
    settings.PICOBOT = settings.PICOBOT.replace(max_turn_output_chars=25)
    long_answer = [TextChunk("0123456789") for _ in range(1000)] + [Done("stop")]
    await start_worker(ScriptedProvider([long_answer, script_text("Short again.")]))
    client = await connect(await make_token())
    await client.until("ready")

    await client.send({"type": "message", "content": "Talk a lot.", "client_msg_id": "cap-1"})
    final = (await client.until("turn_updated", lambda f: f["turn"]["status"] != "running"))["turn"]
    committed = await client.until("turn_committed")

    assert final["status"] == "failed"
    assert final["error"].startswith(
        "The answer and its reasoning were longer than 25 characters and were cut off (ref "
    )
    assert (
        "".join(b["text"] for b in final["blocks"] if b["type"] == "assistant") == "0123456789" * 2 + "01234"
    )
    assert [(m["role"], m["content"], m["completion_status"]) for m in committed["messages"]][1:] == [
        ("assistant", "0123456789" * 2 + "01234", "interrupted")
    ]
    assert (await stored_rows())[1:] == [("assistant", "0123456789" * 2 + "01234", "interrupted")]

    await client.send({"type": "message", "content": "Briefly?", "client_msg_id": "cap-2"})
    second = (
        await client.until(
            "turn_updated", lambda f: f["turn"]["status"] != "running" and f["turn"]["id"] != final["id"]
        )
    )["turn"]
    assert second["status"] == "completed"
    await client.until("turn_committed", lambda f: f["messages"][-1]["content"] == "Short again.")
    assert (await stored_rows())[-1] == ("assistant", "Short again.", "completed")
