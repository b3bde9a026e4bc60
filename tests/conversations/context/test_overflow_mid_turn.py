"""A turn that outgrows the context window after tool calls (``context/overflow.py``, ``fit_request``
in ``context/pruning.py``).

Each later request of a turn is fitted to the window: older tool results are pruned first, then
the largest is cut to one level with a marker, an error result only when nothing else helps; the
stored history keeps every result whole. An overflow of a fitted request is retried once, fitted
to half the budget; a second one fails the turn clearly and keeps its tool chain. An overflow
after reasoning was shown is not retried: the user saw output, the turn cannot start over
unnoticed. What that failure says is in ``test_overflow_wording.py``.

Deterministic: scripted providers (``providers.testing``), no clocks.
"""

from __future__ import annotations

import json
import re

import pytest
from channels.db import database_sync_to_async

from conversations.agent.loop import AgentResult
from conversations.agent.tool_registry import Tool, ToolRegistry
from conversations.context.overflow import overflowed_before_output
from conversations.context.pruning import TRUNCATED_RESULT, fit_request, truncate_tool_results
from conversations.context.tokens import estimate_messages, estimate_request
from conversations.context.turn_input import TOO_LONG
from conversations.models import InboxMessage, Message
from providers.blocks import ToolResultBlock, ToolUseBlock
from providers.chunks import Done, ReasoningDelta, ToolCallArgumentsDelta, ToolCallStart
from providers.errors import ContextOverflowError
from providers.messages import Message as ProviderMessage
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]

REF = re.compile(r"\(ref ([0-9a-f]{8})\)")
ANY_OBJECT = {"type": "object", "properties": {}}


def calls(*pairs: tuple[str, str], arguments: str = "{}") -> list:
    """One model response that calls each ``(call_id, tool_name)`` with ``arguments``."""
    chunks: list = []
    for index, (call_id, name) in enumerate(pairs):
        chunks += [ToolCallStart(index, call_id, name), ToolCallArgumentsDelta(index, arguments)]
    return [*chunks, Done("tool_calls")]


def tool(name: str, handler) -> Tool:
    return Tool(name, name, ANY_OBJECT, handler, timeout=600)


async def begin(connect, start_worker, provider, content: str = "hi", **options):
    """Start a worker, connect, send one message; returns ``(client, session_id, worker)``."""
    worker = await start_worker(provider, **options)
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await client.send({"type": "message", "content": content, "client_msg_id": "fix-1"})
    return client, session_id, worker


async def terminal(client) -> dict:
    return (await client.until("turn_updated", lambda f: f["turn"]["status"] != "running", timeout=20))[
        "turn"
    ]


@database_sync_to_async
def stored() -> dict:
    """Every history row (role, content, completion_status, is_error, tool_call_id) and inbox row."""
    rows = [
        (m.role, m.content, m.completion_status, m.is_error, m.tool_call_id)
        for m in Message.objects.order_by("seq")
    ]
    inbox = list(InboxMessage.objects.order_by("position").values_list("status", "error"))
    return {"rows": rows, "inbox": inbox}


class WindowedProvider(ScriptedProvider):
    """A scripted provider with a context window: a request whose estimate is over ``window``
    tokens is refused with a context overflow (recorded in ``refused``, no script consumed)."""

    def __init__(self, responses, *, window: int) -> None:
        super().__init__(responses)
        self.window = window
        self.refused: list[int] = []
        self.accepted: list[int] = []

    async def _stream(self, request):
        estimate = estimate_request(request.messages, request.tools)
        if estimate > self.window:
            self.refused.append(estimate)
            raise ContextOverflowError(
                f"This model's maximum context length is {self.window} tokens",
                http_status=400,
                provider_code="context_length_exceeded",
            )
        self.accepted.append(estimate)
        async for chunk in super()._stream(request):
            yield chunk


BIG_RESULT = "D" * 12_000  # ≈ 3,430 estimated tokens: three of them overflow an 8,000-token window


async def dump(arguments: dict) -> str:
    return BIG_RESULT


DUMP = ToolRegistry([tool("dump", dump)])
THREE_DUMPS = calls(("d1", "dump"), ("d2", "dump"), ("d3", "dump"))


@pytest.fixture
def window_8000(settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_context_window=8000, auto_title_after=0)


async def test_a_request_after_large_tool_results_is_fitted_to_the_window_and_history_keeps_them(
    connect, start_worker, window_8000
):
    provider = WindowedProvider([THREE_DUMPS, script_text("Done reading.")], window=8000)
    client, _, _ = await begin(connect, start_worker, provider, tools=DUMP)
    turn = await terminal(client)
    assert turn["status"] == "completed", turn["error"]
    assert provider.refused == [] and len(provider.accepted) == 2
    assert max(provider.accepted) <= 8000 * 0.8
    second = provider.requests[1].messages
    results = [b for m in second for b in m.content if isinstance(b, ToolResultBlock)]
    assert [r.tool_call_id for r in results] == ["d1", "d2", "d3"]
    assert all(
        r.content.startswith("DDD") and "tool result cut to fit the context window" in r.content
        for r in results
    )
    state = await stored()
    assert [(r[0], r[1], r[4]) for r in state["rows"] if r[0] == "tool"] == [
        ("tool", BIG_RESULT, "d1"),
        ("tool", BIG_RESULT, "d2"),
        ("tool", BIG_RESULT, "d3"),
    ], "the stored history keeps the results whole"


async def test_an_overflow_at_a_later_iteration_is_retried_once_fitted_harder(
    connect, start_worker, window_8000
):
    # The configured window (8,000) is larger than what the model takes (5,000): the fitted second
    # request still overflows, and is sent once more with half the budget.
    provider = WindowedProvider([THREE_DUMPS, script_text("Done reading.")], window=5000)
    client, _, _ = await begin(connect, start_worker, provider, tools=DUMP)
    turn = await terminal(client)
    assert turn["status"] == "completed", turn["error"]
    assert len(provider.refused) == 1 and 5000 < provider.refused[0] <= 8000 * 0.8
    assert len(provider.accepted) == 2 and provider.accepted[1] <= 8000 * 0.8 / 2
    assert [b["text"] for b in turn["blocks"] if b["type"] == "assistant"] == ["Done reading."]
    state = await stored()
    assert [r[0] for r in state["rows"]] == ["user", "assistant", "tool", "tool", "tool", "assistant"]


async def test_a_second_overflow_at_a_later_iteration_fails_clearly_and_keeps_the_tool_chain(
    connect, start_worker, window_8000
):
    provider = WindowedProvider([THREE_DUMPS, script_text("never")], window=2000)
    client, _, _ = await begin(connect, start_worker, provider, tools=DUMP)
    turn = await terminal(client)
    assert turn["status"] == "failed"
    assert turn["error"].startswith(f"{TOO_LONG}: the model refused this turn's input") and REF.search(
        turn["error"]
    )
    assert "maximum context length" not in turn["error"]
    assert len(provider.refused) == 2, "the fitted request and one harder retry, never more"
    state = await stored()
    assert [(r[0], r[1]) for r in state["rows"]] == [
        ("user", "hi"),
        ("assistant", ""),
        ("tool", BIG_RESULT),
        ("tool", BIG_RESULT),
        ("tool", BIG_RESULT),
    ]
    assert state["inbox"] == [("done", turn["error"])]


def test_fit_request_prunes_older_results_then_cuts_the_largest_and_never_an_error_result_first():
    old_call = ProviderMessage.assistant("", tool_calls=[ToolUseBlock("o1", "dump", {})])
    new_call = ProviderMessage.assistant(
        "", tool_calls=[ToolUseBlock("n1", "dump", {}), ToolUseBlock("n2", "dump", {})]
    )
    messages = [
        ProviderMessage.system("sys"),
        ProviderMessage.user("question"),
        old_call,
        ProviderMessage.tool_result("o1", "O" * 3000, tool_name="dump"),
        new_call,
        ProviderMessage.tool_result("n1", "N" * 6000, tool_name="dump"),
        ProviderMessage.tool_result("n2", "Error: " + "E" * 3000, is_error=True, tool_name="dump"),
    ]
    fitted = fit_request(messages, 2000)
    assert estimate_messages(fitted) <= 2000
    old, newest, error = (m.content[0] for m in (fitted[3], fitted[5], fitted[6]))
    assert old.content == "[older tool result pruned: 3000 chars]"
    assert newest.content.startswith("N" * 100) and newest.content.endswith(" of 6000 chars kept]")
    assert error == messages[6].content[0], "an error result is cut only when nothing else helps"
    assert messages[5].content[0].content == "N" * 6000, "the input is not changed"
    assert fit_request(messages, 100_000) == messages


def test_truncate_tool_results_cuts_to_one_level_with_a_marker():
    messages = [
        ProviderMessage.user("q"),
        ProviderMessage.assistant("", tool_calls=[ToolUseBlock("a", "t", {}), ToolUseBlock("b", "t", {})]),
        ProviderMessage.tool_result("a", "A" * 7000, tool_name="t"),
        ProviderMessage.tool_result("b", "B" * 700, tool_name="t"),
    ]
    cut, count = truncate_tool_results(messages, 1200)
    assert count == 1 and estimate_messages(cut) <= 1200
    content = cut[2].content[0].content
    head = content.split("\n[")[0]
    assert set(head) == {"A"} and content == head + TRUNCATED_RESULT.format(kept=len(head), chars=7000)
    assert cut[3] is messages[3], "a result under the level stays whole"


async def test_an_overflow_after_shown_reasoning_is_not_retried(connect, start_worker):
    first = [
        ReasoningDelta("FIRST-ATTEMPT-REASONING "),
        ContextOverflowError("maximum context length", http_status=400),
    ]
    provider = ScriptedProvider([first, script_text("second answer", reasoning="SECOND-ATTEMPT-REASONING")])
    client, _, _ = await begin(connect, start_worker, provider)
    turn = await terminal(client)
    assert len(provider.requests) == 1, "the reasoning was shown: the turn cannot start over unnoticed"
    assert turn["status"] == "failed" and turn["error"].startswith(TOO_LONG)
    assert [b["text"] for b in turn["blocks"] if b["type"] == "reasoning"] == ["FIRST-ATTEMPT-REASONING "]
    assert "SECOND-ATTEMPT" not in json.dumps(client.frames)
    state = await stored()
    assert [r[0] for r in state["rows"]] == ["user"]


def test_overflowed_before_output_treats_shown_reasoning_as_output():
    overflow = ContextOverflowError("too long", http_status=400)
    assert overflowed_before_output(AgentResult(error=overflow))
    assert not overflowed_before_output(AgentResult(error=overflow, shown_before_error=True))
