"""Supervised background tasks: an owner that bounds, logs, cancels and awaits them (DESIGN §5).

Seed 000 §12: titles (and other non-critical work) run as background tasks managed by a
``TaskSupervisor``; at shutdown they are cancelled and reaped within a time bound. The invariant
of DESIGN §5 — "every background task is supervised and bounded in time at shutdown" — holds for
whatever is spawned here:

* a task's failure is logged with its name and never propagates to whoever spawned it;
* an optional per-task ``timeout`` (seconds) cancels a task that runs too long (logged);
* ``close()`` refuses new work (:class:`SupervisorClosedError`), cancels what runs and awaits it,
  bounded by its own ``timeout``.

Two owners exist: each ``AgentWorker`` has one (titles), and :func:`control_supervisor` is the
process-wide one for control-path requests answered outside the consumer's message loop
(``/compact``); ``serve`` and ``runagent`` close it on shutdown.

Pure asyncio: no Django.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class SupervisorClosedError(RuntimeError):
    """``spawn()`` after ``close()`` began: the owner is shutting down and takes no new work."""


class TaskSupervisor:
    """Owns background tasks: runs them bounded, logs their failures, reaps them at shutdown.

    Args:
        name: the owner's name, used in log lines (``"agent-worker"``, ``"control"``).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task] = set()
        self._closing = False

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def active(self) -> int:
        """How many spawned tasks have not finished yet."""
        return len(self._tasks)

    @property
    def closing(self) -> bool:
        """True once ``close()`` began (``spawn`` then raises)."""
        return self._closing

    def spawn(
        self, coro: Coroutine[Any, Any, Any], *, name: str, timeout: float | None = None
    ) -> asyncio.Task:
        """Run ``coro`` as a supervised task on the running loop.

        Args:
            coro: the work; its return value is discarded.
            name: what the task does, for the log (``"title:cli_chat:alice:1a2b"``).
            timeout: seconds after which the task is cancelled and a warning logged; None for no
                bound of its own (``close()`` still bounds it at shutdown).

        Returns:
            The task. Awaiting it never raises the work's exception (it is logged instead); it
            raises ``CancelledError`` only when the task itself was cancelled.

        Raises:
            SupervisorClosedError: ``close()`` already began (``coro`` is closed, never run).
        """
        if self._closing:
            coro.close()  # never awaited: close it so Python does not warn about it
            raise SupervisorClosedError(
                f"supervisor {self.name!r} is shutting down; {name!r} was not started"
            )
        task = asyncio.get_running_loop().create_task(
            self._guard(coro, name, timeout), name=f"{self.name}:{name}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _guard(self, coro: Coroutine[Any, Any, Any], name: str, timeout: float | None) -> None:
        try:
            if timeout is None:
                await coro
            else:
                async with asyncio.timeout(timeout):
                    await coro
        except TimeoutError:
            log.warning("%s: task %s ran longer than %g s and was cancelled", self.name, name, timeout)
        except Exception:  # CancelledError is not an Exception: a cancelled task ends cancelled
            log.exception("%s: task %s failed", self.name, name)

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until every task spawned so far has finished, without cancelling any.

        Returns True when they all finished, False when ``timeout`` (seconds) passed first.
        Tasks spawned while waiting are waited for too.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            tasks = [t for t in self._tasks if t.get_loop() is loop]
            if not tasks:
                return True
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            await asyncio.wait(tasks, timeout=remaining)

    async def close(self, timeout: float) -> int:
        """Refuse new work, cancel running tasks and await them for at most ``timeout`` seconds.

        Idempotent. Tasks that belong to another (closed) event loop are forgotten, not awaited.

        Returns:
            How many tasks were still unfinished when the bound ran out (0 normally).
        """
        self._closing = True
        loop = asyncio.get_running_loop()
        tasks = [t for t in self._tasks if t.get_loop() is loop and not t.done()]
        self._tasks.difference_update([t for t in self._tasks if t.get_loop() is not loop])
        for task in tasks:
            task.cancel()
        if not tasks:
            return 0
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        if pending:
            log.warning(
                "%s: %d task(s) did not stop within %g s: %s",
                self.name,
                len(pending),
                timeout,
                ", ".join(sorted(t.get_name() for t in pending)),
            )
        return len(pending)


_control: TaskSupervisor | None = None


def control_supervisor() -> TaskSupervisor:
    """The process-wide supervisor of control-path requests (``/compact``; DESIGN §5).

    Created on first use. After :func:`close_control_supervisor` it stays closed (its ``spawn``
    raises :class:`SupervisorClosedError`, so a request arriving during shutdown is refused) until
    :func:`reset_control_supervisor`.
    """
    global _control
    if _control is None:
        _control = TaskSupervisor("control")
    return _control


async def close_control_supervisor(timeout: float) -> int:
    """Close the control supervisor (cancel and await its tasks, bounded by ``timeout`` s).

    Returns the number of tasks still unfinished after the bound; 0 when it was never used.
    """
    return await control_supervisor().close(timeout)


def reset_control_supervisor() -> None:
    """Forget the control supervisor (tests; a restarted in-process server): the next
    :func:`control_supervisor` call makes a fresh, open one."""
    global _control
    _control = None
