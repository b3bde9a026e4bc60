"""The background writer of usage rows: :data:`usage_writer` (issue 17 "Usage and cost").

``install()`` registers :meth:`UsageWriter.observe` with ``providers.metering``: every metered
call of the process is queued (never blocking the stream's task, never raising) and written in
batches by a short-lived drain task on the caller's event loop, through ``run_storage`` (storage
retries), ``delay`` seconds after the first call of a batch. The queue holds at most
``max_pending`` calls: past it the oldest are dropped and logged (a database that stays down must
not grow the process). A batch that keeps failing is logged and dropped; the turn never sees it.

``flush()`` writes everything queued now (``AgentWorker.stop`` calls it; tests call it to read
rows deterministically). Tokens are counted when a batch is written, on the storage thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from conversations.storage.runner import run_storage
from conversations.usage.records import describe_calls, record_calls
from providers.metering import ProviderCall, add_observer

log = logging.getLogger(__name__)


class UsageWriter:
    """Queues provider calls and writes them as ``UsageRecord`` rows (module docstring).

    Args:
        batch_size: calls per ``bulk_create``.
        delay: seconds between the first queued call and its batch's write (gathers a turn's calls).
        max_pending: calls held at most while the database is slow or down.
    """

    def __init__(self, *, batch_size: int = 200, delay: float = 0.05, max_pending: int = 10_000) -> None:
        self.batch_size = batch_size
        self.delay = delay
        self.max_pending = max_pending
        self.dropped = 0
        self._calls: deque[ProviderCall] = deque()
        self._task: asyncio.Task | None = None
        self._timer: asyncio.Future | None = None
        self._flushing = 0  # flush() calls waiting: a drain task starting now writes at once

    @property
    def pending(self) -> int:
        """Calls queued and not yet handed to the database."""
        return len(self._calls)

    def observe(self, call: ProviderCall) -> None:
        """Queue ``call`` (the metering observer): O(1), never raises, never blocks."""
        if len(self._calls) >= self.max_pending:
            lost = self._calls.popleft()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.error(
                    "usage rows dropped (%d so far; %d waiting): the database is not keeping up; lost: %s",
                    self.dropped,
                    len(self._calls),
                    describe_calls([lost]),
                )
        self._calls.append(call)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a call made outside any event loop: the next flush writes it
            return
        task = self._task
        if task is None or task.done() or (task.get_loop() is not loop and task.get_loop().is_closed()):
            try:
                self._task = loop.create_task(self._drain(), name="usage-writer")
            except RuntimeError:  # the loop is shutting down: the next flush writes it
                self._task = None

    async def flush(self) -> None:
        """Write every call queued now (the running batch first); failures are logged, not raised."""
        self._flushing += 1
        try:
            task = self._task
            if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
                if self._timer is not None and not self._timer.done():
                    self._timer.set_result(None)
                await asyncio.shield(task)  # its batch in flight is written before we return
            while self._calls:
                await self._write_next()
        finally:
            self._flushing -= 1

    def discard(self) -> None:
        """Forget every queued call (tests: rows of an earlier test never reach a later one)."""
        self._calls.clear()

    async def _drain(self) -> None:
        if not self._flushing:  # gather the calls of the next ``delay`` seconds into one batch
            loop = asyncio.get_running_loop()
            self._timer = timer = loop.create_future()
            handle = loop.call_later(self.delay, lambda: timer.done() or timer.set_result(None))
            try:
                await timer
            finally:
                handle.cancel()
        while self._calls:
            await self._write_next()

    async def _write_next(self) -> None:
        batch = [self._calls.popleft() for _ in range(min(self.batch_size, len(self._calls)))]
        try:
            await run_storage(record_calls, batch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "usage rows lost: %d calls could not be written: %s", len(batch), describe_calls(batch)
            )


usage_writer = UsageWriter()
"""The process's writer (``install`` registers it)."""


def install() -> None:
    """Record every metered provider call of this process as a usage row (idempotent)."""
    add_observer(usage_writer.observe)


async def flush_usage(timeout: float = 10.0) -> None:
    """``usage_writer.flush()`` bounded by ``timeout`` seconds (shutdown); a timeout is logged."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await usage_writer.flush()
            return
    log.error("usage rows: %d calls still unwritten after %g s at shutdown", usage_writer.pending, timeout)
