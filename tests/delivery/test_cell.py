from __future__ import annotations

import asyncio

from delivery.events import TextDelta
from delivery.turn import TurnController


async def test_wait_newer_returns_at_once_when_a_newer_revision_exists():
    c = TurnController("t", "s", "m")
    c.apply(TextDelta(0, "a"))
    assert await c.cell.wait_newer(0, timeout=0) is True


async def test_wait_newer_times_out_without_changes():
    c = TurnController("t", "s", "m")
    assert await c.cell.wait_newer(0, timeout=0.01) is False


async def test_a_slow_reader_sees_only_the_newest_state():
    c = TurnController("t", "s", "m")
    waiter = asyncio.create_task(c.cell.wait_newer(0, timeout=None))
    await asyncio.sleep(0)
    for part in "abc":
        c.apply(TextDelta(0, part))
    assert await waiter is True
    latest = c.cell.latest()
    assert latest.revision == 3
    assert latest.blocks[0]["text"] == "abc"


async def test_notify_allocates_nothing_when_nobody_waits():
    c = TurnController("t", "s", "m")
    c.apply(TextDelta(0, "a"))
    assert c.cell._changed is None and c.cell._terminal is None


async def test_wait_terminal_ignores_running_changes_and_wakes_on_the_end():
    c = TurnController("t", "s", "m")
    waiter = asyncio.create_task(c.cell.wait_terminal(timeout=None))
    await asyncio.sleep(0)
    c.apply(TextDelta(0, "a"))
    await asyncio.sleep(0)
    assert not waiter.done()
    c.complete()
    assert await waiter is True
    assert c.cell.is_terminal


async def test_wait_terminal_times_out_while_running():
    c = TurnController("t", "s", "m")
    assert await c.cell.wait_terminal(timeout=0.01) is False


async def test_several_readers_are_woken_by_one_change():
    c = TurnController("t", "s", "m")
    waiters = [asyncio.create_task(c.cell.wait_newer(0, timeout=1)) for _ in range(3)]
    await asyncio.sleep(0)
    c.apply(TextDelta(0, "a"))
    assert await asyncio.gather(*waiters) == [True, True, True]
