"""Saves what a worker's running turns have shown, so a turn whose process dies keeps it.

Every ``PICOBOT_TURN_CHECKPOINT_SECONDS`` (0: off) ``TurnCheckpointer`` reads the latest state of
each running turn from its ``TurnController`` (on the event loop, which is the controller's only
writer), keeps the turns whose shown answer or reasoning grew since their last saved checkpoint,
and saves them in ONE storage call (``storage.write_checkpoints``: one transaction) through the
storage runner, off the loop. A takeover commits the last saved one as the turn's ``interrupted``
answer (``storage.checkpoints``).

Bounded, never in the way (DESIGN §2, §7):
- at most one save per turn per period, and only of turns that changed; a join of the turn's
  text at most once per period (the controller caches it per revision);
- at most one save in flight: a round that finds the previous save still running (a slow
  database) skips, so saves are dropped, never queued; the skipped turns go in the next one;
- a failed save is logged and retried with the next round; the turn never waits for a save and
  never hears of its failure.

Why not on the lease keeper's thread (which also writes for every running turn): the keeper's
renewal is the worker's proof of life and must not wait behind a large text write, and the
controller's state is the event loop's to read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from conversations import storage
from conversations.storage.runner import run_storage
from delivery.snapshot import REASONING, TurnSnapshot
from providers.redaction import redact

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointSource:
    """A running turn as the checkpointer sees it: where to save and what shows now."""

    dialog_id: str
    epoch: int
    inbox_id: str
    turn_id: str
    snapshot: Callable[[], TurnSnapshot]


RunningTurns = Callable[[], list[CheckpointSource]]
"""The worker's running turns whose lease is confirmed (called on the event loop)."""


def shown_checkpoint(snapshot: TurnSnapshot) -> dict | None:
    """The checkpoint of what ``snapshot`` shows (``storage.checkpoints`` shape), or None when it
    shows no answer or reasoning text yet. Answer blocks of every iteration are joined by a blank
    line, reasoning blocks likewise; tool blocks are left out."""
    text: list[str] = []
    reasoning: list[str] = []
    iteration = 0
    for block in snapshot.blocks:
        body = block.get("text")
        if not isinstance(body, str) or not body:
            continue
        (reasoning if block.get("type") == REASONING else text).append(body)
        iteration = max(iteration, int(block.get("iteration") or 0))
    if not text and not reasoning:
        return None
    return {
        "text": "\n\n".join(text),
        "reasoning": "\n\n".join(reasoning),
        "iteration": iteration,
        "revision": snapshot.revision,
        "at": int(time.time() * 1000),
    }


class TurnCheckpointer:
    """Saves the running turns' checkpoints of one worker, every ``period`` seconds.

    Args:
        worker_id: The lease owner the saves check.
        running: The running turns (see :data:`RunningTurns`).
        period: Seconds between rounds (> 0).
        write: The storage function (default ``storage.write_checkpoints``).
    """

    def __init__(
        self,
        worker_id: str,
        running: RunningTurns,
        period: float,
        *,
        write: Callable[[str, list[storage.CheckpointWrite]], int] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.running = running
        self.period = period
        self.write = write
        self.saved: dict[str, tuple[int, int]] = {}
        """Turn id → (text length, reasoning length) of its last saved checkpoint."""
        self.skipped_rounds = 0
        """Rounds skipped because the previous save was still running (diagnostics, tests)."""
        self._in_flight: asyncio.Task | None = None

    async def run(self) -> None:
        """Run rounds until cancelled; cancels and awaits a save in flight on the way out."""
        try:
            while True:
                await asyncio.sleep(self.period)
                try:
                    self.round()
                except Exception:  # noqa: BLE001 - a bad snapshot must not end the loop
                    log.exception("turn checkpoint round failed")
        finally:
            await self.close()

    async def close(self) -> None:
        """Cancel and await the save in flight, if any."""
        task, self._in_flight = self._in_flight, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def round(self) -> asyncio.Task | None:
        """One round: start a save of the turns that changed; returns its task, or None when
        nothing changed or the previous save still runs (this round is skipped)."""
        if self._in_flight is not None and not self._in_flight.done():
            self.skipped_rounds += 1
            log.debug("turn checkpoint skipped: the previous save is still running")
            return None
        sources = self.running()
        live = {source.turn_id for source in sources}
        for turn_id in [t for t in self.saved if t not in live]:
            del self.saved[turn_id]
        writes: list[storage.CheckpointWrite] = []
        sizes: dict[str, tuple[int, int]] = {}
        for source in sources:
            checkpoint = shown_checkpoint(source.snapshot())
            if checkpoint is None:
                continue
            size = (len(checkpoint["text"]), len(checkpoint["reasoning"]))
            if self.saved.get(source.turn_id) == size:
                continue  # shown text only grows within a turn: same lengths, same text
            sizes[source.turn_id] = size
            writes.append(
                storage.CheckpointWrite(source.dialog_id, source.epoch, source.inbox_id, checkpoint)
            )
        if not writes:
            return None
        self._in_flight = asyncio.ensure_future(self._save(writes, sizes))
        return self._in_flight

    async def _save(self, writes: list[storage.CheckpointWrite], sizes: dict[str, tuple[int, int]]) -> None:
        write = self.write or storage.write_checkpoints
        try:
            # No retry: the next round writes a newer checkpoint anyway.
            await run_storage(write, self.worker_id, writes, retry=False)
        except Exception as exc:  # noqa: BLE001 - logged; the turn goes on unaffected
            log.warning("could not save %d turn checkpoint(s): %s", len(writes), redact(str(exc)))
            return
        self.saved.update(sizes)
