"""How busy this process is, and how far live snapshots stretch because of it (seed 003: latest-wins).

Under load the product sends fewer frames instead of queueing them (the in-memory
layer cannot carry one frame per chunk for 500 dialogs on 2 cores). :class:`LoopLagGauge`
measures the event loop's lag — how late a timer fires — with fast attack and slow decay;
:meth:`LoopLagGauge.pace` turns a turn's base snapshot interval into the one to use now:

- lag ≤ ``calm_lag`` (10 ms): the base interval (≈30 snapshots/s per turn, seed 003 §9.1);
- above it: ``base × lag / calm_lag``, capped at ``max_interval`` (1 s), so the snapshot work of
  every turn together shrinks as the loop falls behind, and added latency stays bounded by the
  cap instead of growing with a queue.

Terminal snapshots never wait for it (``DeliveryCoordinator``), and a turn's first visible content
goes out at the base interval, so the first token still shows promptly.

Pure module: asyncio only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

__all__ = ["LoopLagGauge"]


class LoopLagGauge:
    """The event loop's current lag in seconds, sampled every ``period`` seconds.

    Args:
        period: Seconds between samples.
        calm_lag: Lag below which nothing is stretched.
        max_interval: The longest snapshot interval :meth:`pace` returns.
        decay: Weight of the old value when a sample is lower (slow decay; a higher sample
            replaces it at once).
        on_sample: Called with each raw sample (seconds ≥ 0), e.g. a metric's ``observe``; it
            must be cheap (it runs every ``period``).
    """

    def __init__(
        self,
        period: float = 0.05,
        *,
        calm_lag: float = 0.010,
        max_interval: float = 1.0,
        decay: float = 0.8,
        on_sample: Callable[[float], object] | None = None,
    ) -> None:
        self.period = period
        self.calm_lag = calm_lag
        self.max_interval = max_interval
        self.decay = decay
        self.on_sample = on_sample
        self.lag = 0.0
        self._task: asyncio.Task | None = None

    def sample(self, late: float) -> None:
        """Record one measurement: a timer fired ``late`` seconds after it was due."""
        late = max(0.0, late)
        if self.on_sample is not None:
            self.on_sample(late)
        self.lag = late if late > self.lag else self.decay * self.lag + (1 - self.decay) * late

    def pace(self, base_interval: float) -> float:
        """The snapshot interval (seconds) to use now for a turn whose base interval is given."""
        if self.lag <= self.calm_lag:
            return base_interval
        return max(base_interval, min(self.max_interval, base_interval * self.lag / self.calm_lag))

    def start(self) -> None:
        """Start sampling on the running loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.period
            await asyncio.sleep(self.period)
            self.sample(loop.time() - due)
