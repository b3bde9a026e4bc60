"""The read deadline of a streamed response body (first byte, then idle gaps; asyncio only).

:class:`ReadDeadline` bounds each body read of :mod:`providers._http` by a loop-time deadline
with one timer per idle period instead of one per read; a fired deadline surfaces as a
cancellation that :meth:`ReadDeadline.expired` tells apart from a real one.
"""

from __future__ import annotations

import asyncio
from typing import Any


class ReadDeadline:
    """A deadline for body reads that is cheap to move: one timer per idle period, not per read.

    ``asyncio.timeout_at`` around every read pushes and cancels a timer-heap entry per SSE event;
    with one event per read (how servers flush tokens) that was about a third of our parse time
    (bench/bench_stream_parse.py). Here a read only records its deadline. The single pending
    timer, when it fires, re-arms itself for a later deadline, or — if the task is still inside
    that read — cancels the task, and :meth:`expired` turns the ``CancelledError`` into a timeout
    with ``asyncio.timeout``'s own rule (``uncancel()`` count), so a real cancellation still wins.
    The task is cancelled only while it awaits a read, never while the caller holds a chunk.
    """

    __slots__ = ("_loop", "_task", "_deadline", "_reading", "_fired", "_cancelling", "_handle", "_when")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[Any] | None = None
        self._deadline = 0.0
        self._reading = False
        self._fired = False
        self._cancelling = 0
        self._handle: asyncio.TimerHandle | None = None
        self._when = 0.0

    def start(self, deadline: float) -> None:
        """A read begins and must end by loop time ``deadline``."""
        # The current task each time: a caller may drive the stream from several tasks.
        task = self._task = asyncio.current_task()
        assert task is not None, "body reads run in a task"
        self._cancelling = task.cancelling()
        self._deadline = deadline
        self._reading = True
        self._fired = False
        if self._handle is None or self._when > deadline:
            if self._handle is not None:
                self._handle.cancel()
            self._arm(deadline)

    def stop(self) -> None:
        """The read ended (data, EOF or error)."""
        self._reading = False

    def expired(self) -> bool:
        """After a ``CancelledError`` in a read: whether it was this deadline, alone."""
        if not self._fired or self._task is None:
            return False
        self._fired = False
        return self._task.uncancel() <= self._cancelling

    def close(self) -> None:
        """Drop the pending timer (idempotent)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, when: float) -> None:
        self._when = when
        self._handle = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._handle = None
        if not self._reading or self._task is None:
            return  # re-armed by the next read
        if self._deadline > self._when:
            self._arm(self._deadline)
            return
        self._fired = True
        self._task.cancel()
