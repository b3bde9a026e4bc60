"""/stop ends a turn within a second even when a tool swallows its cancellation (QA 6b, N6).

A tool that catches ``CancelledError`` and keeps going (a sloppy plugin, a library's retry loop)
held the stop for as long as it ran: the TaskGroup waited for it. Now the turn waits a short grace
(``tool_calls.CANCEL_GRACE_SECONDS``), then abandons the call: it runs on detached, a warning
names it, and its late result is never shown nor kept. The tool here is released by the test, so
"the turn ended while the tool still ran" is an ordering fact, not a timing guess.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from channels.db import database_sync_to_async

from conversations.agent import tool_calls
from conversations.agent.loop import AgentLoop
from conversations.agent.tool_registry import Tool, ToolRegistry
from conversations.models import Message as MessageRow
from conversations.runtime.turn_rows import CANCELLED_TOOL_RESULT
from delivery.events import ToolFinished
from providers.chunks import Done, ToolCallArgumentsDelta, ToolCallStart
from providers.messages import Message
from providers.testing import ScriptedProvider, script_text
from tests.conversations.storage.test_lone_surrogates import finished, start

ANY_OBJECT = {"type": "object", "properties": {}}


class StubbornTool:
    """A tool that swallows every cancellation until the test releases it."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.returned = asyncio.Event()
        self.swallowed = 0

    async def __call__(self, arguments: dict) -> str:
        self.started.set()
        while not self.release.is_set():
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.swallowed += 1  # and keeps going
        self.returned.set()
        return "late result"

    def tool(self) -> Tool:
        return Tool("stubborn", "stubborn", ANY_OBJECT, self)


def calls_stubborn_and_quick() -> list:
    return [
        ToolCallStart(0, "c1", "stubborn"),
        ToolCallArgumentsDelta(0, "{}"),
        ToolCallStart(1, "c2", "quick"),
        ToolCallArgumentsDelta(1, "{}"),
        Done("tool_calls"),
    ]


async def quick(arguments: dict) -> str:
    return "quick result"


async def test_a_cancelled_loop_abandons_a_tool_that_swallows_its_cancellation(caplog, monkeypatch):
    monkeypatch.setattr(tool_calls, "CANCEL_GRACE_SECONDS", 0.05)
    caplog.set_level(logging.WARNING, logger="conversations.agent.tool_calls")
    stubborn = StubbornTool()
    events: list = []
    quick_finished = asyncio.Event()

    def record(event: object) -> None:
        events.append(event)
        if isinstance(event, ToolFinished):
            quick_finished.set()

    provider = ScriptedProvider([calls_stubborn_and_quick(), script_text("never")])
    loop = AgentLoop(
        provider, ToolRegistry([stubborn.tool(), Tool("quick", "quick", ANY_OBJECT, quick)]), record
    )
    task = asyncio.create_task(loop.run([Message.system("s"), Message.user("u")]))
    await stubborn.started.wait()
    await quick_finished.wait()

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert stubborn.swallowed == 1 and not stubborn.returned.is_set(), "the turn did not wait for it"
    [warning] = [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]
    assert "stubborn" in warning and "c1" in warning
    stubborn.release.set()
    await stubborn.returned.wait()
    await asyncio.sleep(0)  # the abandoned call finishes: its result must go nowhere
    assert [e.call_id for e in events if isinstance(e, ToolFinished)] == ["c2"]
    contents = [m.message.content[0].content for m in loop.result.messages if m.message.role == "tool"]
    assert contents == ["quick result"]
    assert not tool_calls._abandoned, "the abandoned call is forgotten once it ended"


@database_sync_to_async
def stored() -> list[tuple]:
    return [(r.role, r.content, r.is_error, r.completion_status) for r in MessageRow.objects.order_by("seq")]


@pytest.mark.django_db(transaction=True)
async def test_stop_ends_the_turn_within_a_second_and_the_late_result_never_appears(connect, start_worker):
    stubborn = StubbornTool()
    provider = ScriptedProvider(
        [
            [ToolCallStart(0, "c1", "stubborn"), ToolCallArgumentsDelta(0, "{}"), Done("tool_calls")],
            script_text("a"),
        ]
    )
    client = await start(connect, start_worker, provider, tools=ToolRegistry([stubborn.tool()]))
    await stubborn.started.wait()

    stopped_at = time.monotonic()
    await client.send({"type": "message", "content": "/stop", "client_msg_id": "stop-1"})
    turn = await finished(client)
    elapsed = time.monotonic() - stopped_at

    assert turn["status"] == "cancelled"
    assert elapsed < 2.0, f"the stop took {elapsed:.2f} s"  # generous: the grace is 0.5 s
    assert not stubborn.returned.is_set(), "the turn ended while the tool still ran"
    await client.until("turn_committed")
    stubborn.release.set()
    await stubborn.returned.wait()
    await asyncio.sleep(0.1)  # time for a late result to go anywhere it could

    rows = await stored()
    assert rows == [
        ("user", "hi", False, "completed"),
        ("assistant", "", False, "cancelled"),  # the stopped turn's last answer
        ("tool", CANCELLED_TOOL_RESULT, True, "completed"),
    ]
    assert "late result" not in str(client.frames)
