"""A tool that raises a BaseException is an error result, not a dead server or a false "stopped"
(QA 6, items 3 and 4; ``GeneratorExit``: QA 6b, B2).

``SystemExit`` (argparse in a plugin) or ``KeyboardInterrupt`` from a tool escaped the registry
and stopped the event loop; a ``CancelledError`` the tool raised on its own (nobody cancelled the
turn) made the TaskGroup drop the call and the turn fail "Internal error" with a stored "the turn
was stopped" result. A real cancellation (``/stop``, a deadline) still goes on at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import sys

import pytest
from channels.db import database_sync_to_async

from conversations.agent.loop import AgentLoop
from conversations.agent.tool_registry import Tool, ToolRegistry
from conversations.models import Message as MessageRow
from providers.chunks import Done, ToolCallArgumentsDelta, ToolCallStart
from providers.messages import Message
from providers.testing import ScriptedProvider, script_text
from providers.types import ToolCall
from tests.conversations.storage.test_lone_surrogates import finished, start

ANY_OBJECT = {"type": "object", "properties": {}}


async def cancels_itself(arguments: dict) -> str:
    future = asyncio.get_running_loop().create_future()
    future.cancel()
    await future  # CancelledError, though nobody cancelled the turn
    return "unreachable"


async def exits(arguments: dict) -> str:
    sys.exit(2)


async def interrupts(arguments: dict) -> str:
    raise KeyboardInterrupt


async def generator_exit(arguments: dict) -> str:
    raise GeneratorExit  # on its own, while it runs: a tool bug, not a coroutine being closed


async def ok(arguments: dict) -> str:
    return "fine"


def tool(name: str, handler) -> Tool:
    return Tool(name, name, ANY_OBJECT, handler)


def two_calls(first: str, second: str) -> list:
    return [
        ToolCallStart(0, "c1", first),
        ToolCallArgumentsDelta(0, "{}"),
        ToolCallStart(1, "c2", second),
        ToolCallArgumentsDelta(1, "{}"),
        Done("tool_calls"),
    ]


@pytest.mark.parametrize(
    ("handler", "kind"),
    [
        (cancels_itself, "CancelledError"),
        (exits, "SystemExit"),
        (interrupts, "KeyboardInterrupt"),
        (generator_exit, "GeneratorExit"),
    ],
)
async def test_a_tool_raising_a_base_exception_becomes_a_logged_error_result(caplog, handler, kind):
    with caplog.at_level(logging.ERROR, logger="conversations.agent.tool_registry"):
        outcome = await ToolRegistry([tool("probe", handler)]).run(ToolCall("c1", "probe", "{}"))

    ref = re.fullmatch(rf"Error: probe failed: {kind} \(ref ([0-9a-f]{{8}})\)", outcome.content).group(1)
    assert outcome.is_error is True
    records = [r for r in caplog.records if r.name == "conversations.agent.tool_registry"]
    assert len(records) == 1
    assert records[0].getMessage().startswith(f"tool probe crashed (ref {ref}): ")
    assert "\n" not in records[0].getMessage()


async def test_cancelling_the_task_running_a_tool_still_cancels_it_at_once():
    started = asyncio.Event()

    async def slow(arguments: dict) -> str:
        started.set()
        await asyncio.sleep(30)
        return "too late"

    task = asyncio.create_task(ToolRegistry([tool("slow", slow)]).run(ToolCall("c1", "slow", "{}")))
    await started.wait()
    task.cancel()

    async with asyncio.timeout(1):
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_closing_a_suspended_tool_call_from_outside_still_closes_it(caplog):
    """``coroutine.close()`` (what a task destroyed while pending does) throws GeneratorExit into
    the tool: that one is not the tool's own — the call closes, and no tool crash is reported."""
    caplog.set_level(logging.ERROR, logger="conversations.agent.tool_registry")
    started = asyncio.Event()

    async def waits(arguments: dict) -> str:
        started.set()
        await asyncio.sleep(30)
        return "unreachable"

    coroutine = ToolRegistry([tool("waits", waits)]).run(ToolCall("c1", "waits", "{}"))
    task = asyncio.ensure_future(coroutine)
    await started.wait()

    coroutine.close()

    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    assert not [r for r in caplog.records if "crashed" in r.getMessage()]
    task.cancel()
    with contextlib.suppress(BaseException):
        await task


@pytest.mark.parametrize("handler", [cancels_itself, exits, generator_exit])
async def test_the_agent_loop_goes_on_after_such_a_tool_and_keeps_its_sibling(handler):
    provider = ScriptedProvider([two_calls("bad", "ok"), script_text("answer")])
    loop = AgentLoop(provider, ToolRegistry([tool("bad", handler), tool("ok", ok)]), lambda event: None)

    result = await loop.run([Message.system("s"), Message.user("u")])

    assert (result.error, result.final_text) == (None, "answer")
    results = [m.message for m in result.messages if m.message.role == "tool"]
    assert [(r.content[0].is_error, r.content[0].content) for r in results][1] == (False, "fine")
    assert results[0].content[0].is_error is True


async def test_stop_during_a_tool_cancels_the_agent_loop_promptly():
    started = asyncio.Event()

    async def slow(arguments: dict) -> str:
        started.set()
        await asyncio.sleep(30)
        return "too late"

    provider = ScriptedProvider([two_calls("slow", "ok"), script_text("answer")])
    loop = AgentLoop(provider, ToolRegistry([tool("slow", slow), tool("ok", ok)]), lambda event: None)
    task = asyncio.create_task(loop.run([Message.system("s"), Message.user("u")]))
    await started.wait()
    task.cancel()

    async with asyncio.timeout(1):
        with pytest.raises(asyncio.CancelledError):
            await task


@database_sync_to_async
def stored() -> list[tuple]:
    return [(r.role, r.content, r.is_error) for r in MessageRow.objects.order_by("dialog_id", "seq")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("handler", "kind"),
    [(cancels_itself, "CancelledError"), (exits, "SystemExit"), (generator_exit, "GeneratorExit")],
)
async def test_the_turn_completes_with_an_error_result_and_no_false_stop(
    connect, start_worker, settings, handler, kind
):
    settings.PICOBOT = settings.PICOBOT.replace(auto_title_after=0)
    provider = ScriptedProvider([two_calls("bad", "ok"), script_text("answer")])
    tools = ToolRegistry([tool("bad", handler), tool("ok", ok)])
    client = await start(connect, start_worker, provider, tools=tools)
    turn = await finished(client)

    assert turn["status"] == "completed", turn["error"]
    rows = await stored()
    assert [r[0] for r in rows] == ["user", "assistant", "tool", "tool", "assistant"]
    assert (
        re.fullmatch(rf"Error: bad failed: {kind} \(ref [0-9a-f]{{8}}\)", rows[2][1]) and rows[2][2] is True
    )
    assert rows[3][1:] == ("fine", False)
    assert not any("stopped" in (content or "") for _, content, _ in rows)
