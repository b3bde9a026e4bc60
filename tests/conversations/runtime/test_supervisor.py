"""TaskSupervisor: supervised background tasks, bounded at shutdown (DESIGN §5, seed 000 §12)."""

from __future__ import annotations

import asyncio
import inspect
import logging

import pytest

from conversations.runtime.supervisor import (
    SupervisorClosedError,
    TaskSupervisor,
    close_control_supervisor,
    control_supervisor,
    reset_control_supervisor,
)


@pytest.fixture(autouse=True)
def fresh_control_supervisor():
    reset_control_supervisor()
    yield
    reset_control_supervisor()


async def test_a_failing_task_is_logged_with_its_name_and_never_raises_to_the_spawner(caplog):
    supervisor = TaskSupervisor("test")

    async def boom() -> None:
        raise ValueError("kaputt")

    with caplog.at_level(logging.ERROR, logger="conversations.runtime.supervisor"):
        task = supervisor.spawn(boom(), name="title:d1")
        assert await task is None
    assert len(supervisor) == 0
    [record] = caplog.records
    assert "title:d1" in record.getMessage() and record.exc_info[0] is ValueError


async def test_a_task_past_its_timeout_is_cancelled_with_a_warning(caplog):
    supervisor = TaskSupervisor("test")
    never = asyncio.Event()
    finished = []

    async def slow() -> None:
        try:
            await never.wait()
        finally:
            finished.append(True)

    with caplog.at_level(logging.WARNING, logger="conversations.runtime.supervisor"):
        await supervisor.spawn(slow(), name="slow", timeout=0.01)
    assert finished == [True]
    assert "slow" in caplog.text and "0.01 s" in caplog.text


async def test_close_cancels_running_tasks_and_awaits_them():
    supervisor = TaskSupervisor("test")
    started, cleaned = asyncio.Event(), []

    async def work(n: int) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # cleanup that needs the loop still runs before close() returns
            cleaned.append(n)

    tasks = [supervisor.spawn(work(n), name=f"w{n}") for n in range(3)]
    await started.wait()
    assert supervisor.active == len(supervisor) == 3
    assert await supervisor.close(timeout=1) == 0
    assert sorted(cleaned) == [0, 1, 2]
    assert all(t.cancelled() for t in tasks)
    assert supervisor.active == 0


async def test_close_is_bounded_when_a_task_refuses_to_stop(caplog):
    supervisor = TaskSupervisor("test")
    release, entered = asyncio.Event(), asyncio.Event()

    async def stubborn() -> None:
        entered.set()
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # ignores cancellation until released

    task = supervisor.spawn(stubborn(), name="stubborn")
    await entered.wait()
    with caplog.at_level(logging.WARNING, logger="conversations.runtime.supervisor"):
        assert await supervisor.close(timeout=0.01) == 1
    assert "stubborn" in caplog.text
    release.set()
    await task


async def test_spawn_after_close_began_is_refused_and_the_work_never_runs():
    supervisor = TaskSupervisor("test")
    await supervisor.close(timeout=1)
    ran = []

    async def work() -> None:
        ran.append(True)

    coro = work()
    with pytest.raises(SupervisorClosedError, match="late"):
        supervisor.spawn(coro, name="late")
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # no "never awaited" warning
    assert ran == [] and supervisor.closing


async def test_a_task_cancelled_by_someone_else_is_not_an_error(caplog):
    supervisor = TaskSupervisor("test")
    entered = asyncio.Event()

    async def work() -> None:
        entered.set()
        await asyncio.Event().wait()

    task = supervisor.spawn(work(), name="cancel-me")
    await entered.wait()
    with caplog.at_level(logging.WARNING, logger="conversations.runtime.supervisor"):
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert caplog.records == [] and len(supervisor) == 0


async def test_drain_waits_for_tasks_without_cancelling_them():
    supervisor = TaskSupervisor("test")
    gate = asyncio.Event()
    done = []

    async def work() -> None:
        await gate.wait()
        done.append(True)

    supervisor.spawn(work(), name="w")
    assert await supervisor.drain(timeout=0.01) is False
    gate.set()
    assert await supervisor.drain(timeout=1) is True
    assert done == [True]


async def test_the_control_supervisor_is_one_per_process_and_refuses_work_after_its_close():
    supervisor = control_supervisor()
    assert control_supervisor() is supervisor
    entered = asyncio.Event()

    async def compact() -> None:
        entered.set()
        await asyncio.Event().wait()

    task = supervisor.spawn(compact(), name="compact:d1")
    await entered.wait()
    assert await close_control_supervisor(timeout=1) == 0
    assert task.cancelled()

    async def late() -> None:
        pass

    with pytest.raises(SupervisorClosedError):
        control_supervisor().spawn(late(), name="compact:d2")
    reset_control_supervisor()
    assert control_supervisor() is not supervisor and not control_supervisor().closing


async def test_closing_an_unused_control_supervisor_is_fine():
    assert await close_control_supervisor(timeout=1) == 0
