"""One turn's delivery, end to end, with exactly one plain fallback (seed 000 §5).

:meth:`TurnDelivery.open` opens the target's sink and starts a
:class:`~delivery.coordinator.DeliveryCoordinator` on it. It never raises: when opening fails
(the seeds' ``start() -> Err``) the turn is delivered *final-only from the start* — no live
updates, one plain terminal message at the end.

After the turn's rows are committed and its terminal state set, the session calls
:meth:`TurnDelivery.settle`: it waits for the coordinator's result (bounded) and, when the
terminal snapshot was not delivered, sends **exactly one** plain message through the
:class:`~delivery.outbound.OutboundDispatcher` (what it says per status, and when nothing is sent:
``delivery/README.md``, seed 000 §5.2). ``settle`` is idempotent: a second call returns the same
outcome and sends nothing. The session records ``outcome.failure`` (a ``DeliveryFailure`` row) —
this module does no I/O of its own besides the sink and the dispatcher.

Pure module (asyncio only): no Django, Channels or httpx imports.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from delivery.coordinator import open_delivery
from delivery.handle import STALE_TURN_ERROR, DeliveryResult, DeliveryStartError, TurnDeliveryHandle
from delivery.outbound import OutboundDispatcher, OutboundMessage, OutboundResult
from delivery.presentation import PresentationPolicy
from delivery.sinks import TurnSink
from delivery.snapshot import TurnSnapshot, TurnStatus
from delivery.turn import TurnController

__all__ = ["DeliveryOutcome", "FailureReport", "TurnDelivery", "fallback_id", "fallback_message"]

logger = logging.getLogger(__name__)

NO_ANSWER_TEXT = "The model returned no answer."


@dataclass(frozen=True, slots=True)
class FailureReport:
    """What the session records as a ``DeliveryFailure`` row.

    Attributes:
        stage: ``"open"`` (the sink never opened), ``"finish"`` (the terminal snapshot was not
            delivered) or ``"fallback"`` (and the plain fallback certainly failed too: the user
            got nothing). A fallback whose outcome is unknown (it may have been delivered) keeps
            the sink's stage and says so in ``error``.
        error: What failed, e.g. ``"finish: SinkError: chat is gone; fallback: …"``.
        attempts: ``finish`` calls made (0 when the sink never opened).
    """

    stage: str
    error: str
    attempts: int


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """How a turn's delivery ended.

    Attributes:
        delivered: The sink delivered the terminal snapshot.
        fallback: The result of the one plain fallback message, or None when none was sent
            (``fallback.ok`` is None when it may or may not have arrived).
        failure: What to record, or None (delivered, or a stale turn).
    """

    delivered: bool
    fallback: OutboundResult | None
    failure: FailureReport | None


def fallback_id(turn_id: str) -> str:
    """The idempotency key of a turn's one fallback message: the same for every copy."""
    return f"{turn_id}:fallback"


def fallback_message(snapshot: TurnSnapshot) -> tuple[str, str] | None:
    """The plain message for a terminal snapshot whose delivery failed (seed 000 §5.2).

    Returns:
        ``(level, text)``, or None when nothing should be sent (a cancelled turn that showed no
        answer text). Reasoning is never included; a completed turn's text is its answer as
        history commits it (``TurnSnapshot.answer_text``: one part per assistant message).
    """
    answer = snapshot.answer_text()
    if snapshot.status is TurnStatus.COMPLETED:
        return "info", answer or NO_ANSWER_TEXT
    # Never claim what history holds: delivery does not know whether the commit succeeded.
    if snapshot.status is TurnStatus.FAILED:
        return "error", f"This answer failed: {(snapshot.error or 'unknown error').rstrip('.')}."
    if snapshot.status is TurnStatus.CANCELLED and answer:
        return "warning", f"This answer was stopped ({snapshot.error or 'cancelled'})."
    return None


class TurnDelivery:
    """The session's view of one turn's delivery: open, then settle once. Use :meth:`open`."""

    def __init__(
        self,
        controller: TurnController,
        handle: TurnDeliveryHandle | None,
        start_error: str | None,
        dispatcher: OutboundDispatcher,
        *,
        channel: str,
        chat_id: str,
    ) -> None:
        self._controller = controller
        self._handle = handle
        self._start_error = start_error
        self._dispatcher = dispatcher
        self._channel = channel
        self._chat_id = chat_id
        self._outcome: DeliveryOutcome | None = None
        self._settling = False
        self._fallback_submitted = False

    @classmethod
    async def open(
        cls,
        controller: TurnController,
        open_sink: Callable[[], Awaitable[TurnSink]],
        policy: PresentationPolicy,
        dispatcher: OutboundDispatcher,
        *,
        channel: str,
        chat_id: str,
        **options: Any,
    ) -> TurnDelivery:
        """Opens the sink and starts live delivery; on failure, final-only from the start.

        Args:
            controller: The turn.
            open_sink: Creates the target's sink (may do I/O; bounded by ``open_timeout``).
            policy: The target's presentation policy.
            dispatcher: Where the plain fallback goes.
            channel: The target chat's platform.
            chat_id: The target chat.
            **options: For :func:`~delivery.coordinator.open_delivery` (``open_timeout``) and the
                coordinator (``finish_attempts``, ``retry_delays``, …).

        Returns:
            The delivery; never raises for delivery problems.
        """
        try:
            handle = await open_delivery(controller, open_sink, policy, **options)
            start_error = None
        except DeliveryStartError as exc:
            logger.warning("turn %s: delivering final-only: %s", controller.turn_id, exc)
            handle, start_error = None, str(exc)
        return cls(controller, handle, start_error, dispatcher, channel=channel, chat_id=chat_id)

    @property
    def live(self) -> bool:
        """False when the sink could not be opened (final-only from the start)."""
        return self._handle is not None

    async def settle(self, timeout: float | None = None) -> DeliveryOutcome:  # noqa: ASYNC109 - bounds the wait for the sink
        """Waits for the terminal delivery; on failure sends the one plain fallback.

        Call after the turn is terminal. A repeated call returns the first outcome; even after
        a cancelled call, at most one fallback is ever submitted.

        Args:
            timeout: Seconds to wait for the sink at most (then delivery is cancelled and counts
                as failed). The fallback is bounded by the dispatcher's own limits.

        Returns:
            The :class:`DeliveryOutcome`. Never raises for delivery problems.

        Raises:
            RuntimeError: Called while another ``settle`` of this turn is running.
        """
        if self._outcome is None:
            if self._settling:
                raise RuntimeError("settle() is already running")
            self._settling = True
            try:
                self._outcome = await self._settle(timeout)
            finally:
                self._settling = False
        return self._outcome

    def cancel(self) -> None:
        """Stops live delivery (the session is being torn down); the sink is still closed.

        Sends no fallback. A no-op once delivery ended. Idempotent.
        """
        if self._handle is not None:
            self._handle.cancel()

    async def _settle(self, timeout: float | None) -> DeliveryOutcome:
        if self._handle is None:
            stage, error, attempts = "open", self._start_error or "could not open the sink", 0
        else:
            result: DeliveryResult = await self._handle.wait(timeout)
            if result.ok:
                return DeliveryOutcome(delivered=True, fallback=None, failure=None)
            if result.error == STALE_TURN_ERROR:
                return DeliveryOutcome(delivered=False, fallback=None, failure=None)
            stage, error, attempts = "finish", result.error or "unknown error", result.attempts
        snapshot = self._controller.snapshot()
        if not snapshot.is_terminal:
            # Settled early (a bug or a hard shutdown): never send a "final" of a running turn.
            logger.error("turn %s: delivery settled before the turn ended", snapshot.id)
            return DeliveryOutcome(
                delivered=False, fallback=None, failure=FailureReport(stage, error, attempts)
            )
        message = fallback_message(snapshot)
        if message is None or self._fallback_submitted:
            return DeliveryOutcome(
                delivered=False, fallback=None, failure=FailureReport(stage, error, attempts)
            )
        level, text = message
        self._fallback_submitted = True
        fallback = await self._dispatcher.deliver(
            OutboundMessage(
                self._channel,
                self._chat_id,
                text,
                level=level,
                session_id=snapshot.session_id,
                turn_id=snapshot.id,
                id=fallback_id(snapshot.id),
            )
        )
        if fallback.ok is False:
            logger.error("turn %s: the plain fallback failed too: %s", snapshot.id, fallback.error)
            return DeliveryOutcome(
                delivered=False,
                fallback=fallback,
                failure=FailureReport("fallback", f"{stage}: {error}; fallback: {fallback.error}", attempts),
            )
        if fallback.ok is None:
            # It may have arrived: not "the user got nothing", and never sent again.
            logger.warning(
                "turn %s: the plain fallback may not have arrived: %s", snapshot.id, fallback.error
            )
            detail = f"{error}; fallback outcome unknown (may have been delivered): {fallback.error}"
            return DeliveryOutcome(
                delivered=False, fallback=fallback, failure=FailureReport(stage, detail, attempts)
            )
        return DeliveryOutcome(
            delivered=False, fallback=fallback, failure=FailureReport(stage, error, attempts)
        )
