"""The session's end of a turn's delivery: the handle, how delivery ended, the start error.

:meth:`delivery.coordinator.DeliveryCoordinator.start` returns a :class:`TurnDeliveryHandle`;
the session awaits ``handle.wait()`` after publishing the terminal state and sends its one plain
fallback message when the :class:`DeliveryResult` is not ok (seed 000 §5;
:class:`delivery.turn_delivery.TurnDelivery` does both). ``wait()`` never raises for delivery
problems. Start failures are distinct::

    DeliveryError
    └── DeliveryStartError    start()/open_delivery(): nothing was delivered, deliver plainly

Asyncio only: no Django, Channels or httpx imports.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "STALE_TURN_ERROR",
    "DeliveryError",
    "DeliveryResult",
    "DeliveryStartError",
    "TurnDeliveryHandle",
    "describe_error",
]

#: ``DeliveryResult.error`` of a turn whose owner went stale: nothing more may be published.
STALE_TURN_ERROR = "stale turn"


class DeliveryError(Exception):
    """Base of the coordinator's own errors."""


class DeliveryStartError(DeliveryError):
    """Delivery could not start (bad sink, sink could not open, no loop, supervisor stopped).

    The session delivers the terminal result as a plain message instead (seed 000 §5.1).
    """


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """How a turn's delivery ended.

    Attributes:
        ok: True when the terminal snapshot was delivered.
        error: Why not (``"<ExceptionType>: <message>"``, "cancelled", a timeout), else None.
        attempts: How many times ``finish`` was called (0 if the turn never got there).
        last_delivered_revision: The newest revision the sink accepted, or None.
    """

    ok: bool
    error: str | None
    attempts: int
    last_delivered_revision: int | None


class _Delivering(Protocol):
    """What a handle reads of its :class:`~delivery.coordinator.DeliveryCoordinator`."""

    _closer: asyncio.Task[None] | None

    def _result(self, *, ok: bool, error: str | None) -> DeliveryResult: ...


class TurnDeliveryHandle:
    """The session's end of a running delivery (seed 000 §5.1); from ``start()`` only."""

    def __init__(self, coordinator: _Delivering, task: asyncio.Future[DeliveryResult]) -> None:
        self._coordinator = coordinator
        self._task = task

    @property
    def done(self) -> bool:
        return self._task.done()

    async def wait(self, timeout: float | None = None) -> DeliveryResult:  # noqa: ASYNC109 - the caller's overall bound on delivery
        """Waits until delivery ended; every await inside is bounded by the coordinator's timeouts.

        Args:
            timeout: Seconds to wait at most. When it passes, delivery is cancelled (so a late
                success cannot race the caller's fallback), the sink is closed, and the result
                says so. None waits for the coordinator's own bounds (finish attempts × timeout);
                note a turn that never ends is not bounded by them.

        Returns:
            The :class:`DeliveryResult`; ``ok`` is False on any failure. Never raises for those.
        """
        task = self._task
        timed_out = False
        if not task.done():
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if not done:
                timed_out = task.cancel()
                await asyncio.wait({task})
        closer = self._coordinator._closer
        if closer is not None and not closer.done():
            await asyncio.wait({closer})
        if task.cancelled():
            error = f"delivery timed out after {timeout}s" if timed_out else "delivery cancelled"
            return self._coordinator._result(ok=False, error=error)
        exc = task.exception()
        if exc is not None:
            return self._coordinator._result(ok=False, error=describe_error(exc))
        return task.result()

    def cancel(self) -> None:
        """Stops delivery (shutdown or a stale turn); the sink is still closed. Idempotent."""
        self._task.cancel()


def describe_error(exc: BaseException) -> str:
    """``"<ExceptionType>: <message>"``, or the type alone when the message is empty."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
