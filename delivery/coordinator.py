"""Delivers one turn's snapshots to one sink: filter, throttle, terminal flush (seed 003 §9, §10).

A :class:`DeliveryCoordinator` watches a turn's :class:`~delivery.cell.LatestSnapshotCell`, applies
the target's :class:`~delivery.presentation.PresentationPolicy` once per snapshot it publishes,
serialises that filtered view exactly once, and hands both — the
:class:`~delivery.presentation.PresentedSnapshot` and its JSON text — to its :class:`TurnSink`
(a sink never sees the unfiltered snapshot, seed 003 §10.1):

- running snapshots are throttled to the sink's :class:`Snapshot` ``min_interval`` and are
  best-effort: a failed or timed-out ``update`` is logged and never retried — the next, newer
  snapshot goes instead; a slow sink only ever skips intermediate states (latest-wins);
- the terminal snapshot bypasses the throttle and is delivered with bounded retry;
- the coordinator owns the sink from ``start()`` on and closes it at the end, whatever happens.

The sink contract (``TurnSink``, ``LivePolicy``, ``SinkError``) lives in :mod:`delivery.sinks`;
:meth:`DeliveryCoordinator.start` returns the session's :class:`~delivery.handle.TurnDeliveryHandle`
(:mod:`delivery.handle`: the result, ``DeliveryStartError``). The delivery rules are in
``delivery/README.md``.

Asyncio only: no Django, Channels or httpx imports.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from delivery.cell import LatestSnapshotCell
from delivery.handle import (
    STALE_TURN_ERROR,
    DeliveryResult,
    DeliveryStartError,
    TurnDeliveryHandle,
    describe_error,
)
from delivery.presentation import PresentationPolicy, PresentedSnapshot, serialize_snapshot
from delivery.sinks import FinalOnly, SinkError, SinkNotModified, Snapshot, TurnSink
from delivery.snapshot import TurnSnapshot
from delivery.turn import TurnController

__all__ = ["DeliveryCoordinator", "open_delivery"]

logger = logging.getLogger(__name__)

# Running snapshots of one turn, in bytes of JSON per second: at 30/s snapshots up to ~16 KB (a
# typical answer) go out at full rate, a 50 KB one about 10 times a second, a 500 KB one once a
# second. This keeps the publishing cost per streamed token flat however long the turn gets
# (bench/bench_turn_reduce.py, "paced").
DEFAULT_MAX_BYTES_PER_SECOND = 500_000
# A turn spends at most about 1/this of its time publishing running updates (a slow layer).
PUBLISH_SHARE_INVERSE = 4


FINISH_ATTEMPTS = 3
FINISH_TIMEOUT = 10.0  # seconds for one ``finish`` call
FINISH_RETRY_DELAYS = (0.1, 0.2, 0.4)  # seconds before the 2nd, 3rd, … attempt
# The longest a live process keeps trying one final with the defaults (seconds): a recovery path
# in another process waits this long after the turn ended before it delivers the same final.
FINISH_BUDGET = FINISH_ATTEMPTS * FINISH_TIMEOUT + sum(FINISH_RETRY_DELAYS[: FINISH_ATTEMPTS - 1])


class DeliveryCoordinator:
    """Delivers one turn to one sink. Use once: construct, ``start()``, then ``handle.wait()``.

    Args:
        source: The turn's controller, or its cell.
        sink: The target; owned (and closed) by the coordinator once ``start()`` succeeded.
        policy: The target's presentation policy; ``live=False`` means terminal only.
        finish_attempts: How many times to try ``finish`` at most (≥ 1).
        finish_timeout: Seconds allowed for one ``finish`` call.
        retry_delays: Seconds to sleep before the 2nd, 3rd, … attempt (the last one repeats).
        update_timeout: Seconds allowed for one running ``update``; on timeout it is abandoned.
        close_timeout: Seconds allowed for ``sink.close()``.
        is_current: The session's stale-state check (seed 003 §8.3, DESIGN §6), called before
            every snapshot goes out; once it returns False nothing more is published and the
            result is not ok (``"stale turn"``). Must be cheap and synchronous (an in-memory
            generation or lease-epoch comparison).

        max_bytes_per_second: Upper bound on running-snapshot bytes published per second for this
            turn: after a snapshot of N bytes the next waits at least N / this seconds (on top of
            the sink's ``min_interval``), so long turns publish less often instead of costing
            more per token. Terminal snapshots are never delayed by it.
        pace: Maps the sink's base interval to the one to use now (``delivery.load.LoopLagGauge.pace``):
            a busy process publishes each turn less often instead of queueing frames. Until the
            turn has shown content its base interval holds (the first token shows promptly).
            Independently, a running update that took T seconds to publish (a slow layer) is
            followed by the next no sooner than ``PUBLISH_SHARE_INVERSE × T`` later.

    Raises:
        ValueError: ``finish_attempts`` < 1.
    """

    def __init__(
        self,
        source: TurnController | LatestSnapshotCell,
        sink: TurnSink,
        policy: PresentationPolicy,
        *,
        finish_attempts: int = FINISH_ATTEMPTS,
        finish_timeout: float = FINISH_TIMEOUT,
        retry_delays: Sequence[float] = FINISH_RETRY_DELAYS,
        update_timeout: float = 5.0,
        close_timeout: float = 5.0,
        is_current: Callable[[], bool] | None = None,
        max_bytes_per_second: float = DEFAULT_MAX_BYTES_PER_SECOND,
        pace: Callable[[float], float] | None = None,
    ) -> None:
        if finish_attempts < 1:
            raise ValueError("finish_attempts must be >= 1")
        self._cell = source.cell if isinstance(source, TurnController) else source
        self._sink = sink
        self._policy = policy
        self._finish_attempts = finish_attempts
        self._finish_timeout = finish_timeout
        self._retry_delays = tuple(retry_delays) or (0.0,)
        self._update_timeout = update_timeout
        self._close_timeout = close_timeout
        self._is_current = is_current
        self._max_bytes_per_second = max_bytes_per_second
        self._pace = pace
        self._handle: TurnDeliveryHandle | None = None
        self._attempts = 0
        self._last_revision: int | None = None
        self._sink_closed = False
        self._closer: asyncio.Task[None] | None = None

    def start(
        self,
        *,
        spawn: Callable[[Coroutine[Any, Any, DeliveryResult]], asyncio.Future[DeliveryResult]] | None = None,
    ) -> TurnDeliveryHandle:
        """Starts the delivery task on the running loop.

        Args:
            spawn: Creates the task (e.g. a supervisor's ``spawn``); defaults to
                ``asyncio.ensure_future``. It may raise to refuse (supervisor stopped).

        Returns:
            The handle; delivery has started, nothing has been delivered yet.

        Raises:
            DeliveryStartError: Already started, the sink does not look like a ``TurnSink``, no
                running event loop, or ``spawn`` refused. The sink was not used and was not
                closed: the caller still owns it.
        """
        if self._handle is not None:
            raise DeliveryStartError("delivery already started")
        _check_sink(self._sink)
        try:
            asyncio.get_running_loop()
        except RuntimeError as exc:
            raise DeliveryStartError("no running event loop") from exc
        coro = self._run()
        try:
            task = (spawn or asyncio.ensure_future)(coro)
        except Exception as exc:
            coro.close()
            raise DeliveryStartError(f"could not start delivery: {describe_error(exc)}") from exc
        task.add_done_callback(self._ensure_sink_closed)
        self._handle = TurnDeliveryHandle(self, task)
        return self._handle

    # -- the task ----------------------------------------------------------------------------

    async def _run(self) -> DeliveryResult:
        try:
            await self._follow_running()
            return await self._deliver_terminal(self._cell.latest())
        except _StaleTurn:
            # A stale owner must not edit the target any more (seed 003 §8.3): stop silently.
            return self._result(ok=False, error=STALE_TURN_ERROR)
        finally:
            await self._close_sink()

    def _check_current(self) -> None:
        if self._is_current is not None and not self._is_current():
            raise _StaleTurn

    def _live_interval(self) -> float | None:
        live_policy = self._sink.live_policy
        if not self._policy.live or not isinstance(live_policy, Snapshot):
            return None
        return live_policy.min_interval

    async def _follow_running(self) -> None:
        """Delivers running snapshots until the turn is terminal (latest-wins, throttled)."""
        cell = self._cell
        interval = self._live_interval()
        if interval is None:
            await cell.wait_terminal(None)
            return
        loop = asyncio.get_running_loop()
        seen = -1
        shown_content = False  # until the turn shows something, snapshots are never stretched
        next_update_at = loop.time()  # the first snapshot goes out at once
        while not cell.is_terminal:
            if cell.revision <= seen:
                await cell.wait_newer(seen, None)
                continue
            delay = next_update_at - loop.time()
            if delay > 0:
                # Sleep out the throttle, but a terminal snapshot must not wait for it.
                await cell.wait_terminal(delay)
                continue
            snapshot = cell.latest()
            seen = snapshot.revision
            if snapshot.is_terminal:
                return
            paced = self._pace(interval) if self._pace is not None and shown_content else interval
            next_update_at = loop.time() + paced
            if self._is_current is not None and not self._is_current():
                # Possibly stale (seed 003 §8.3): publish no running update now. Only the terminal
                # check is final — an owner whose lease only lapsed locally and whose commit then
                # proved the lease must still deliver its final state.
                continue
            began = loop.time()
            sent_bytes = await self._deliver_update(snapshot)
            shown_content = shown_content or bool(snapshot.blocks)
            # Bytes per second stay bounded: a long turn's big snapshots go out less often, so
            # the publishing cost per streamed token does not grow with the turn (DESIGN §7);
            # and a slow layer is given a breather rather than a queue.
            finished = loop.time()
            next_update_at = max(
                next_update_at,
                finished + sent_bytes / self._max_bytes_per_second,
                finished + PUBLISH_SHARE_INVERSE * (finished - began),
            )

    def _present(self, snapshot: TurnSnapshot) -> tuple[PresentedSnapshot, str]:
        """The filtered view a sink gets and its JSON: one filtering, one serialisation."""
        view = self._policy.present(snapshot)
        return view, serialize_snapshot(view, self._policy)

    async def _deliver_update(self, snapshot: TurnSnapshot) -> int:
        """Delivers one running snapshot (best effort); returns the payload size in bytes (chars)."""
        payload = ""
        try:
            view, payload = self._present(snapshot)
            async with asyncio.timeout(self._update_timeout):
                await self._sink.update(view, payload)
        except SinkNotModified:
            pass
        except Exception as exc:
            # Best-effort (seed 003 §9.1): never retry a stale snapshot; a newer one follows.
            logger.warning(
                "turn %s: live update r%d failed: %s", snapshot.id, snapshot.revision, describe_error(exc)
            )
            return len(payload)
        self._last_revision = snapshot.revision
        return len(payload)

    async def _deliver_terminal(self, snapshot: TurnSnapshot) -> DeliveryResult:
        view, payload = self._present(snapshot)
        error = "finish was not attempted"
        for attempt in range(1, self._finish_attempts + 1):
            if attempt > 1:
                await asyncio.sleep(self._retry_delays[min(attempt - 2, len(self._retry_delays) - 1)])
            self._check_current()
            self._attempts = attempt
            try:
                async with asyncio.timeout(self._finish_timeout):
                    await self._sink.finish(view, payload)
            except SinkNotModified:
                pass
            except Exception as exc:
                error = describe_error(exc)
                if isinstance(exc, TimeoutError):
                    error = f"finish timed out after {self._finish_timeout}s"
                logger.warning(
                    "turn %s: finish r%d attempt %d/%d failed: %s",
                    snapshot.id,
                    snapshot.revision,
                    attempt,
                    self._finish_attempts,
                    error,
                )
                if isinstance(exc, SinkError) and exc.permanent:
                    break
                continue
            self._last_revision = snapshot.revision
            return self._result(ok=True, error=None)
        return self._result(ok=False, error=error)

    def _ensure_sink_closed(self, task: asyncio.Future[DeliveryResult]) -> None:
        # A task cancelled before its first step never enters _run's ``finally``: close it here.
        if not self._sink_closed:
            self._closer = asyncio.ensure_future(self._close_sink())

    async def _close_sink(self) -> None:
        if self._sink_closed:
            return
        self._sink_closed = True
        try:
            async with asyncio.timeout(self._close_timeout):
                await self._sink.close()
        except Exception as exc:
            logger.warning("delivery sink close failed: %s", describe_error(exc))

    def _result(self, *, ok: bool, error: str | None) -> DeliveryResult:
        return DeliveryResult(
            ok=ok, error=error, attempts=self._attempts, last_delivered_revision=self._last_revision
        )


async def open_delivery(
    source: TurnController | LatestSnapshotCell,
    open_sink: Callable[[], Awaitable[TurnSink]],
    policy: PresentationPolicy,
    *,
    open_timeout: float = 10.0,
    **options: Any,
) -> TurnDeliveryHandle:
    """Opens a sink (the seeds' ``Channel.open_turn``) and starts delivering to it.

    Args:
        source: The turn's controller or cell.
        open_sink: Creates the sink; may do I/O (e.g. resolve the remote chat).
        policy: The target's presentation policy.
        open_timeout: Seconds allowed for ``open_sink()``.
        **options: Passed to :class:`DeliveryCoordinator`.

    Returns:
        The running delivery's handle.

    Raises:
        DeliveryStartError: Opening failed or timed out, or ``start()`` refused (the freshly
            opened sink is closed then).
    """
    try:
        async with asyncio.timeout(open_timeout):
            sink = await open_sink()
    except Exception as exc:
        raise DeliveryStartError(f"could not open the turn sink: {describe_error(exc)}") from exc
    coordinator = DeliveryCoordinator(source, sink, policy, **options)
    try:
        return coordinator.start()
    except DeliveryStartError:
        await coordinator._close_sink()
        raise


class _StaleTurn(Exception):
    pass


def _check_sink(sink: object) -> None:
    for name in ("update", "finish", "close"):
        if not callable(getattr(sink, name, None)):
            raise DeliveryStartError(f"sink {type(sink).__name__} has no {name}()")
    if not isinstance(getattr(sink, "live_policy", None), FinalOnly | Snapshot):
        raise DeliveryStartError(f"sink {type(sink).__name__} has no valid live_policy")
