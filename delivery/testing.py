"""Test helpers any app's tests can import: a recording, scriptable ``TurnSink``.

Pure module (asyncio only).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from delivery.sinks import LivePolicy, Snapshot

if TYPE_CHECKING:
    from delivery.snapshot import TurnSnapshot

__all__ = ["RecordingSink"]


class RecordingSink:
    """A fake sink that records every call and can be scripted to fail or stall.

    Args:
        live_policy: What the sink supports; defaults to unthrottled snapshots.
        update_errors: Outcome of successive ``update`` calls: an exception to raise, or None
            to succeed; calls past the end succeed.
        finish_errors: The same for ``finish``.
        close_error: Raised by ``close`` (after recording it), if given.

    Attributes:
        updates: ``(snapshot, payload_json)`` of every ``update`` call, failed ones included.
        finishes: The same for ``finish``.
        delivered: Payloads of the calls that succeeded, in order.
        close_calls: How many times ``close`` was called.
        update_gate: When set to an unset ``asyncio.Event``, ``update`` waits for it (a slow
            client); ``finish`` waits on ``finish_gate`` likewise.
    """

    def __init__(
        self,
        live_policy: LivePolicy | None = None,
        *,
        update_errors: Iterable[BaseException | None] = (),
        finish_errors: Iterable[BaseException | None] = (),
        close_error: BaseException | None = None,
    ) -> None:
        self.live_policy: LivePolicy = live_policy if live_policy is not None else Snapshot(0.0)
        self._update_errors = deque(update_errors)
        self._finish_errors = deque(finish_errors)
        self._close_error = close_error
        self.updates: list[tuple[TurnSnapshot, str]] = []
        self.finishes: list[tuple[TurnSnapshot, str]] = []
        self.delivered: list[str] = []
        self.close_calls = 0
        self.update_gate: asyncio.Event | None = None
        self.finish_gate: asyncio.Event | None = None

    @property
    def closed(self) -> bool:
        return self.close_calls > 0

    @property
    def update_revisions(self) -> list[int]:
        """Revisions passed to ``update``, in call order."""
        return [snapshot.revision for snapshot, _ in self.updates]

    async def update(self, snapshot: TurnSnapshot, payload_json: str) -> None:
        self.updates.append((snapshot, payload_json))
        if self.update_gate is not None:
            await self.update_gate.wait()
        error = self._update_errors.popleft() if self._update_errors else None
        if error is not None:
            raise error
        self.delivered.append(payload_json)

    async def finish(self, snapshot: TurnSnapshot, payload_json: str) -> None:
        self.finishes.append((snapshot, payload_json))
        if self.finish_gate is not None:
            await self.finish_gate.wait()
        error = self._finish_errors.popleft() if self._finish_errors else None
        if error is not None:
            raise error
        self.delivered.append(payload_json)

    async def close(self) -> None:
        self.close_calls += 1
        if self._close_error is not None:
            raise self._close_error
