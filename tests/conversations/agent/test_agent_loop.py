"""The agent loop against a scripted provider (pure async; no database)."""

from __future__ import annotations

import asyncio

import pytest

from conversations.agent.loop import AgentLoop
from conversations.agent.tool_registry import Tool, ToolFatalError, ToolRegistry
from conversations.context.history import repair_tool_pairs
from delivery.events import ReasoningDelta, TextDelta, TextSegmentFinished, ToolFinished, ToolStarted
from providers.blocks import ToolResultBlock, ToolUseBlock
from providers.chunks import Done, ToolCallArgumentsDelta, ToolCallStart, UsageChunk
from providers.chunks import ReasoningDelta as ReasoningChunk
from providers.chunks import TextDelta as TextChunk
from providers.errors import OverloadedError
from providers.messages import Message, Usage
from providers.testing import ScriptedProvider, script_text, script_tool_call

INPUT = [Message.system("You are PicoBot."), Message.user("What is the weather?")]
ANY_OBJECT = {"type": "object", "properties": {}}


def tool(name: str, handler, parameters: dict | None = None) -> Tool:
    return Tool(name=name, description=name, parameters=parameters or ANY_OBJECT, handler=handler)


async def sunny(arguments: dict) -> str:
    return "sunny"


def two_calls(first: tuple[str, str], second: tuple[str, str]) -> list:
    """One response that calls two tools (``(id, name)`` each) with ``{}`` arguments."""
    return [
        ToolCallStart(0, first[0], first[1]),
        ToolCallArgumentsDelta(0, "{}"),
        ToolCallStart(1, second[0], second[1]),
        ToolCallArgumentsDelta(1, "{}"),
        Done("tool_calls"),
    ]


class Recorder(list):
    def __call__(self, event: object) -> None:
        self.append(event)


def loop(provider: ScriptedProvider, tools: list[Tool], **kwargs) -> tuple[AgentLoop, Recorder]:
    events = Recorder()
    return AgentLoop(provider, ToolRegistry(tools), events, **kwargs), events


def tool_results(messages: list[Message]) -> list[ToolResultBlock]:
    return [b for m in messages for b in m.content if isinstance(b, ToolResultBlock)]


def tool_uses(messages: list[Message]) -> list[ToolUseBlock]:
    return [b for m in messages for b in m.content if isinstance(b, ToolUseBlock)]


async def test_the_models_tool_call_id_reaches_the_result_and_the_next_request():
    provider = ScriptedProvider(
        [script_tool_call("call_Xy7", "weather", {"city": "Paris"}), script_text("It is sunny.")]
    )
    agent, _ = loop(provider, [tool("weather", sunny)])

    result = await agent.run(INPUT)

    assert [(m.iteration, m.message.role) for m in result.messages] == [
        (0, "assistant"),
        (0, "tool"),
        (1, "assistant"),
    ]
    assert tool_uses([result.messages[0].message]) == [ToolUseBlock("call_Xy7", "weather", {"city": "Paris"})]
    assert tool_results([result.messages[1].message]) == [
        ToolResultBlock("call_Xy7", "sunny", False, "weather")
    ]
    second = provider.requests[1].messages
    assert second[:2] == INPUT
    assert tool_uses(second) == [ToolUseBlock("call_Xy7", "weather", {"city": "Paris"})]
    assert tool_results(second) == [ToolResultBlock("call_Xy7", "sunny", False, "weather")]
    assert result.final_text == "It is sunny."
    assert result.usage == Usage(20, 10)
    assert (result.finish_reason, result.iterations, result.error, result.partial) == ("stop", 2, None, None)


async def test_an_earlier_request_is_not_changed_by_later_iterations():
    provider = ScriptedProvider([script_tool_call("c1", "weather", {}), script_text("done")])
    agent, _ = loop(provider, [tool("weather", sunny)])

    await agent.run(INPUT)

    assert provider.requests[0].messages == INPUT
    assert len(provider.requests[1].messages) == 4


async def test_events_arrive_in_stream_order_and_text_is_closed_before_tools_start():
    first = [
        ReasoningChunk("Need"),
        ReasoningChunk(" data."),
        TextChunk("Let me"),
        TextChunk(" check."),
        ToolCallStart(0, "call_1", "weather"),
        ToolCallArgumentsDelta(0, '{"city": '),
        ToolCallArgumentsDelta(0, '"Paris"}'),
        UsageChunk(Usage(10, 5)),
        Done("tool_calls"),
    ]
    provider = ScriptedProvider([first, script_text("Sunny.", reasoning="Got it.")])
    agent, events = loop(provider, [tool("weather", sunny)])

    await agent.run(INPUT)

    assert events == [
        ReasoningDelta(0, "Need"),
        ReasoningDelta(0, " data."),
        TextDelta(0, "Let me"),
        TextDelta(0, " check."),
        TextSegmentFinished(0),
        ToolStarted(0, "call_1", "weather", {"city": "Paris"}),
        ToolFinished(0, "call_1", True, "sunny"),
        ReasoningDelta(1, "Got"),
        ReasoningDelta(1, " it."),
        TextDelta(1, "Sunny."),
    ]


async def test_a_failing_tool_call_is_reported_as_unsuccessful_and_the_turn_goes_on():
    provider = ScriptedProvider([script_tool_call("c1", "nope", "{not json"), script_text("Sorry.")])
    agent, events = loop(provider, [tool("weather", sunny)])

    result = await agent.run(INPUT)

    started = [e for e in events if isinstance(e, ToolStarted)]
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert started == [ToolStarted(0, "c1", "nope", {})], (
        "not a JSON object: {} (the raw text stays on the server)"
    )
    assert [(e.call_id, e.success) for e in finished] == [("c1", False)]
    (block,) = tool_results([m.message for m in result.messages])
    assert block.is_error is True and block.content.startswith("Error: unknown tool 'nope'")
    assert result.final_text == "Sorry."


async def test_calls_of_one_response_run_concurrently():
    barrier = asyncio.Barrier(2)

    async def meet(arguments: dict) -> str:
        await barrier.wait()  # deadlocks if the calls run one after the other
        return "met"

    provider = ScriptedProvider([two_calls(("c1", "left"), ("c2", "right")), script_text("Both met.")])
    agent, events = loop(provider, [tool("left", meet), tool("right", meet)])

    async with asyncio.timeout(5):
        result = await agent.run(INPUT)

    assert [
        (b.tool_call_id, b.content, b.is_error) for b in tool_results([m.message for m in result.messages])
    ] == [
        ("c1", "met", False),
        ("c2", "met", False),
    ]
    kinds = [type(e).__name__ for e in events if isinstance(e, ToolStarted | ToolFinished)]
    assert kinds == ["ToolStarted", "ToolStarted", "ToolFinished", "ToolFinished"]


async def test_calls_over_the_per_response_cap_are_dropped_and_the_last_kept_result_says_how_many():
    ran: list[int] = []

    async def count(arguments: dict) -> str:
        ran.append(arguments["n"])
        return f"ran {arguments['n']}"

    response = []
    for index in range(5):
        response += [
            ToolCallStart(index, f"c{index}", "count"),
            ToolCallArgumentsDelta(index, f'{{"n": {index}}}'),
        ]
    provider = ScriptedProvider([response + [Done("tool_calls")], script_text("done")])
    agent, events = loop(provider, [tool("count", count)], max_calls_per_response=3)

    async with asyncio.timeout(5):
        result = await agent.run(INPUT)

    assert sorted(ran) == [0, 1, 2]  # the two calls over the cap never ran
    second = provider.requests[1].messages
    # Dropped from the assistant message itself: neither sent back, nor stored, nor shown.
    assert [b.id for b in tool_uses(second)] == ["c0", "c1", "c2"]
    assert [b.id for b in tool_uses([m.message for m in result.messages])] == ["c0", "c1", "c2"]
    results = tool_results(second)
    assert [(b.tool_call_id, b.is_error) for b in results] == [("c0", False), ("c1", False), ("c2", False)]
    assert [b.content for b in results[:2]] == ["ran 0", "ran 1"]
    assert results[2].content == (
        "ran 2\n\n(2 further tool calls of this response were dropped: at most 3 run per response)"
    )
    assert {e.call_id for e in events if isinstance(e, ToolStarted)} == {"c0", "c1", "c2"}
    assert {e.call_id: e.success for e in events if isinstance(e, ToolFinished)} == {
        "c0": True,
        "c1": True,
        "c2": True,
    }
    # The kept history pairs every call with its result: repair has nothing to drop or invent.
    kept = [m.message for m in result.messages]
    assert repair_tool_pairs(kept) == kept
    assert result.final_text == "done"


async def test_thousands_of_calls_in_one_response_leave_only_the_capped_ones_in_history():
    async def ok(arguments: dict) -> str:
        return "fine"

    response = []
    for index in range(5000):
        response += [ToolCallStart(index, f"c{index}", "ok"), ToolCallArgumentsDelta(index, "{}")]
    provider = ScriptedProvider([response + [Done("tool_calls")], script_text("done")])
    agent, events = loop(provider, [tool("ok", ok)])

    async with asyncio.timeout(30):
        result = await agent.run(INPUT)

    roles = [m.message.role for m in result.messages]
    assert roles == ["assistant"] + ["tool"] * 64 + ["assistant"]
    assert len(tool_uses(provider.requests[1].messages)) == 64
    assert len(tool_results(provider.requests[1].messages)) == 64
    assert sum(isinstance(e, ToolStarted) for e in events) == 64
    assert tool_results([result.messages[64].message])[0].content.endswith(
        "(4936 further tool calls of this response were dropped: at most 64 run per response)"
    )


async def test_results_keep_call_order_even_when_a_later_call_finishes_first():
    release_first = asyncio.Event()

    async def slow(arguments: dict) -> str:
        await release_first.wait()
        return "slow"

    async def fast(arguments: dict) -> str:
        release_first.set()
        return "fast"

    provider = ScriptedProvider([two_calls(("c1", "slow"), ("c2", "fast")), script_text("ok")])
    agent, events = loop(provider, [tool("slow", slow), tool("fast", fast)])

    async with asyncio.timeout(5):
        result = await agent.run(INPUT)

    assert [b.tool_call_id for b in tool_results(provider.requests[1].messages)] == ["c1", "c2"]
    assert [e.call_id for e in events if isinstance(e, ToolFinished)] == ["c2", "c1"]
    assert [m.message.role for m in result.messages] == ["assistant", "tool", "tool", "assistant"]


async def test_a_model_that_always_calls_a_tool_stops_after_max_iterations_with_a_toolless_last_request():
    provider = ScriptedProvider([script_tool_call(f"c{i}", "weather", {}) for i in range(10)])
    agent, _ = loop(provider, [tool("weather", sunny)], max_iterations=3)

    result = await agent.run(INPUT)

    assert len(provider.requests) == 3
    assert [[d.name for d in r.tools] for r in provider.requests] == [["weather"], ["weather"], []]
    assert result.iterations == 3
    assert result.error is None
    # The calls of the tool-less last response are not run: the turn ends on that answer.
    assert [m.message.role for m in result.messages] == [
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert result.messages[-1].message.tool_calls == []


async def test_a_single_iteration_turn_sends_no_tools():
    provider = ScriptedProvider([script_text("Hi.")])
    agent, _ = loop(provider, [tool("weather", sunny)], max_iterations=1)

    result = await agent.run(INPUT)

    assert provider.requests[0].tools == []
    assert result.final_text == "Hi."


async def test_a_provider_failure_after_text_keeps_the_shown_text_as_partial():
    error = OverloadedError("connection reset")
    provider = ScriptedProvider([[ReasoningChunk("Hmm."), TextChunk("Half an"), TextChunk(" answer"), error]])
    agent, events = loop(provider, [])

    result = await agent.run(INPUT)

    assert result.error is error
    assert result.partial.iteration == 0
    assert result.partial.message == Message.assistant(text="Half an answer", reasoning="Hmm.")
    assert result.messages == []
    assert events[-1] == TextDelta(0, " answer")


async def test_a_provider_failure_in_a_later_iteration_keeps_the_earlier_messages():
    provider = ScriptedProvider(
        [script_tool_call("c1", "weather", {}), [TextChunk("It is"), OverloadedError("gone")]]
    )
    agent, _ = loop(provider, [tool("weather", sunny)])

    result = await agent.run(INPUT)

    assert [(m.iteration, m.message.role) for m in result.messages] == [(0, "assistant"), (0, "tool")]
    assert (result.partial.iteration, result.partial.message.text) == (1, "It is")
    assert result.iterations == 2


async def test_a_provider_failure_before_any_text_has_no_partial():
    error = OverloadedError("upstream overloaded", http_status=503)
    agent, events = loop(ScriptedProvider([error]), [])

    result = await agent.run(INPUT)

    assert (result.error, result.partial, result.messages, list(events)) == (error, None, [], [])


async def test_a_provider_failure_after_a_half_streamed_tool_call_runs_no_tool():
    ran: list[dict] = []

    async def record(arguments: dict) -> str:
        ran.append(arguments)
        return "ran"

    chunks = [ToolCallStart(0, "c1", "weather"), ToolCallArgumentsDelta(0, "{}"), OverloadedError("cut")]
    agent, events = loop(ScriptedProvider([chunks]), [tool("weather", record)])

    result = await agent.run(INPUT)

    assert (result.partial, ran) == (None, [])
    assert not any(isinstance(e, ToolStarted) for e in events)


async def test_an_empty_tool_call_id_gets_a_generated_id_shared_by_call_and_result():
    provider = ScriptedProvider([script_tool_call("", "weather", {}), script_text("Sunny.")])
    agent, events = loop(provider, [tool("weather", sunny)])

    result = await agent.run(INPUT)

    (use,) = tool_uses([result.messages[0].message])
    (res,) = tool_results([result.messages[1].message])
    assert use.id.startswith("call_") and len(use.id) > len("call_")
    assert res.tool_call_id == use.id
    assert [e.call_id for e in events if isinstance(e, ToolStarted | ToolFinished)] == [use.id, use.id]
    assert (
        tool_uses(provider.requests[1].messages)[0].id
        == tool_results(provider.requests[1].messages)[0].tool_call_id
        == use.id
    )


async def test_two_calls_with_empty_ids_get_different_ids():
    provider = ScriptedProvider([two_calls(("", "weather"), ("", "weather")), script_text("ok")])
    agent, _ = loop(provider, [tool("weather", sunny)])

    result = await agent.run(INPUT)

    ids = [u.id for u in tool_uses([result.messages[0].message])]
    assert len(set(ids)) == 2 and all(ids)
    assert [r.tool_call_id for r in tool_results([m.message for m in result.messages])] == ids


async def test_a_fatal_tool_error_cancels_the_sibling_calls_and_propagates():
    sibling_started = asyncio.Event()
    sibling_cancelled = asyncio.Event()

    async def hang(arguments: dict) -> str:
        sibling_started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            sibling_cancelled.set()
            raise
        return "never"

    async def fatal(arguments: dict) -> str:
        await sibling_started.wait()
        raise ToolFatalError("storage is gone")

    provider = ScriptedProvider([two_calls(("c1", "hang"), ("c2", "fatal")), script_text("unreachable")])
    agent, events = loop(provider, [tool("hang", hang), tool("fatal", fatal)])

    async with asyncio.timeout(5):
        with pytest.raises(ToolFatalError, match="storage is gone"):
            await agent.run(INPUT)

    assert sibling_cancelled.is_set()
    assert len(provider.requests) == 1
    assert not any(isinstance(e, ToolFinished) for e in events)
