"""Keeps a worker's dialog leases alive from a thread of its own (DESIGN §2: slow is not dead).

A renewal that runs on the event loop, one storage call per dialog, is starved exactly when the
process is busiest: measured, a single process streaming 300–500 dialogs let
its leases lapse and reported its own live turns "interrupted". ``LeaseKeeper`` instead renews
every lease the worker owns in ONE statement (``storage.renew_worker_leases``) every
``renew_seconds``, on a dedicated thread with its own database connection, so neither a busy
loop nor a queue of storage calls delays it.

It also tells the worker, definitively, when a lease was lost: after each renewal (also one that
failed) it compares the epochs of the dialogs the worker runs with the database and calls
``on_lost(dialog_id, epoch)`` on the loop for each one another worker claimed (or a delete
bumped). Only that — never a late renewal — ends a turn as stale. While renewals fail,
``confirmed_until`` runs out and live snapshots pause (their owner may be stale); the turn goes
on, and its commit's epoch check decides.

A loop that does not run a callback for ``stall_limit`` seconds is taken as hung (a blocking call
that never returns): renewal stops until it answers again, so another worker may take over. A
loop that is merely slow still answers within that bound.

Threads and Django: the keeper's thread holds its own connection and closes it when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from django.db import connections

from conversations import storage
from providers.redaction import redact

log = logging.getLogger(__name__)

HeldLeases = Callable[[], list[tuple[str, int]]]
"""Returns the ``(dialog_id, epoch)`` pairs the worker runs now; called from the keeper thread,
so it must only copy (``list(d.items())`` is atomic under the GIL)."""


class LeaseKeeper:
    """Renews all of one worker's leases and reports the ones it lost.

    Args:
        worker_id: The lease owner id.
        lease_seconds: The lease length each renewal sets.
        renew_seconds: Seconds between renewals (well below ``lease_seconds``).
        held: The worker's held leases (see :data:`HeldLeases`).
        on_lost: Called on the event loop with ``(dialog_id, epoch)`` for each lost lease.
        stall_limit: Seconds without a loop callback after which renewal pauses (a hung loop).
    """

    def __init__(
        self,
        worker_id: str,
        *,
        lease_seconds: float,
        renew_seconds: float,
        held: HeldLeases,
        on_lost: Callable[[str, int], None],
        stall_limit: float | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.lease_ms = int(lease_seconds * 1000)
        self.renew_seconds = renew_seconds
        self.held = held
        self.on_lost = on_lost
        self.stall_limit = stall_limit if stall_limit is not None else max(60.0, 4 * lease_seconds)
        self.renewals = 0
        """Successful renewal rounds so far (tests and diagnostics)."""
        self.confirmed_until = 0.0
        """Monotonic time until which every lease the worker held at the last successful round is
        certainly its own (that round's start + the lease): live snapshots pause past it."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_seen = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stalled = False
        self._round = asyncio.Event()

    def start(self) -> None:
        """Start the thread (call on the running loop that ``on_lost`` runs on)."""
        self._loop = asyncio.get_running_loop()
        self._round = asyncio.Event()
        self._loop_seen = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"picobot-lease-{self.worker_id}", daemon=True)
        self._thread.start()

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (off the loop), bounded by ``timeout`` s."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join, timeout)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.renew_seconds):
                self.renew_once()
        finally:
            connections.close_all()  # this thread's connection (PostgreSQL drops need it closed)

    def _loop_answered(self) -> None:
        self._loop_seen = time.monotonic()

    def renew_once(self) -> None:
        """One round: renew, then report lost leases. Never raises (logs instead)."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the worker is going down
                loop.call_soon_threadsafe(self._loop_answered)
            silent = time.monotonic() - self._loop_seen
            if silent > self.stall_limit:
                if not self._stalled:
                    log.error(
                        "the event loop has not run for %.0f s: lease renewal paused so that another "
                        "worker can take this worker's dialogs over",
                        silent,
                    )
                self._stalled = True
                return
            if self._stalled:
                log.warning("the event loop answers again: lease renewal resumed")
                self._stalled = False
        started = time.monotonic()
        renewed = False
        try:
            storage.renew_worker_leases(self.worker_id, self.lease_ms)
            renewed = True
        except Exception as exc:
            log.warning("lease renewal failed (%s); retrying in %.1f s", redact(str(exc)), self.renew_seconds)
            self._close_connection()
        try:  # even when renewing failed: a claim by another worker must still be noticed
            held = self.held()
            current = storage.lease_epochs([dialog_id for dialog_id, _ in held]) if held else {}
        except Exception as exc:
            log.warning("could not read this worker's lease epochs (%s)", redact(str(exc)))
            self._close_connection()
            return
        if renewed:
            self.renewals += 1
            self.confirmed_until = started + self.lease_ms / 1000
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: the worker is going down
            for dialog_id, epoch in held:
                if current.get(dialog_id) != (self.worker_id, epoch):
                    loop.call_soon_threadsafe(self.on_lost, dialog_id, epoch)
            loop.call_soon_threadsafe(self._round_done)  # after the losses: waiters see them

    def _round_done(self) -> None:
        event, self._round = self._round, asyncio.Event()
        event.set()

    async def next_round(self) -> None:
        """Wait until the next renewal round has told what it could (its losses reported first)."""
        await self._round.wait()

    @staticmethod
    def _close_connection() -> None:
        with contextlib.suppress(Exception):
            connections["default"].close()
