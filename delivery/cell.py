"""A latest-value cell for one turn's snapshots (the seeds' ``watch``; seed 003 §5.4).

The producer (a :class:`delivery.turn.TurnController`) calls :meth:`LatestSnapshotCell.notify`
after every change; readers ask for the newest snapshot. Nothing is queued: a reader that was slow
sees only the newest state (latest-wins), so a slow sink can never slow the producer.

``notify()`` is O(1) and allocates nothing unless someone is waiting. Snapshots are materialised
only when a reader calls :meth:`LatestSnapshotCell.latest` (the source caches them per revision).

Not thread-safe: producer and readers run on one event loop. Pure module (asyncio only).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from delivery.snapshot import TurnSnapshot

__all__ = ["LatestSnapshotCell", "SnapshotSource"]


class SnapshotSource(Protocol):
    """What the cell reads from its producer (a ``TurnController`` satisfies it)."""

    @property
    def revision(self) -> int: ...

    @property
    def is_terminal(self) -> bool: ...

    def snapshot(self) -> TurnSnapshot: ...


class LatestSnapshotCell:
    """Holds the producer and wakes readers when it changes.

    Args:
        source: The producer; its ``revision`` must strictly increase on every change and it
            must call :meth:`notify` after each one.
    """

    __slots__ = ("_source", "_changed", "_terminal")

    def __init__(self, source: SnapshotSource) -> None:
        self._source = source
        self._changed: asyncio.Event | None = None
        self._terminal: asyncio.Event | None = None

    @property
    def revision(self) -> int:
        """The newest revision, without materialising a snapshot."""
        return self._source.revision

    @property
    def is_terminal(self) -> bool:
        """True once the turn reached a terminal status (it never changes again)."""
        return self._source.is_terminal

    def latest(self) -> TurnSnapshot:
        """Returns the newest snapshot (materialised on demand, cached per revision)."""
        return self._source.snapshot()

    def notify(self) -> None:
        """Wakes waiting readers; called by the producer after each change. O(1)."""
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()
        terminal = self._terminal
        if terminal is not None and self._source.is_terminal:
            self._terminal = None
            terminal.set()

    async def wait_newer(self, than_revision: int, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - the deadline is the caller's throttle, not a network bound
        """Waits until the revision is greater than ``than_revision``.

        Args:
            than_revision: The revision the reader already has (-1 for none).
            timeout: Seconds to wait at most; None waits until a change.

        Returns:
            True when a newer revision is available (at once if it already is), False when the
            timeout passed first. Fetch it with :meth:`latest`; intermediate revisions are gone.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._source.revision <= than_revision:
            if self._changed is None:
                self._changed = asyncio.Event()
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            if not await _wait_event(self._changed, remaining):
                return self._source.revision > than_revision
        return True

    async def wait_terminal(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - see wait_newer
        """Waits until the turn is terminal, ignoring non-terminal changes (no wake-up per token).

        Args:
            timeout: Seconds to wait at most; None waits until the turn ends.

        Returns:
            True when the turn is terminal, False when the timeout passed first.
        """
        if self._source.is_terminal:
            return True
        if self._terminal is None:
            self._terminal = asyncio.Event()
        await _wait_event(self._terminal, timeout)
        return self._source.is_terminal


async def _wait_event(event: asyncio.Event, seconds: float | None) -> bool:
    if seconds is None:
        await event.wait()
        return True
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
