"""The outbound dispatcher: complete, independent messages, ordered per chat (seed 003 §9.2).

Live turn snapshots go through a :class:`~delivery.coordinator.DeliveryCoordinator`; everything
else a chat receives as a message of its own — the one plain fallback after a failed turn
delivery (seed 000 §5.2), later scheduled deliveries — goes through an
:class:`OutboundDispatcher`: one lane per ``(channel, chat_id)`` (in order; a slow chat never
delays another), a bounded queue per lane (then :class:`OutboundRefusedError`), a timeout per
send, lanes owned and awaited by the dispatcher.

A sender is an ``async (OutboundMessage) -> None`` per channel that raises on failure; it must not
report "not sent" as success. Every message carries an idempotency key (``OutboundMessage.id``)
that senders put on the wire. Retries are at-most-once unless the sender is idempotent:

- :class:`OutboundNotSentError` from a sender ("nothing was sent"): retried;
- ``SinkError(permanent=True)``: nothing was sent and retrying cannot help: not retried;
- any other error or a timeout: the message may have been delivered. Retried only when
  ``sender.idempotent`` is True; otherwise the outcome is unknown, never "not sent".

:class:`OutboundResult` says which: ``status`` ``"sent"`` (``ok`` True), ``"not_sent"`` (``ok``
False: the user got nothing) or ``"unknown"`` (``ok`` None: do not send it again). The rules are
in ``delivery/README.md``.

Pure module (asyncio only): no Django, Channels or httpx imports.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from delivery.sinks import SinkError

__all__ = [
    "OutboundDispatcher",
    "OutboundMessage",
    "OutboundNotSentError",
    "OutboundRefusedError",
    "OutboundResult",
    "OutboundSender",
    "OutboundStatus",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """One complete message for one chat.

    Attributes:
        channel: Platform name (``"cli_chat"``, ``"feishu"``); picks the sender.
        chat_id: The chat on that platform; with ``channel`` it picks the lane.
        text: The message body (plain text).
        level: ``"info"``, ``"warning"`` or ``"error"`` (platforms with rich frames show it).
        session_id: The dialog it is about, if any.
        turn_id: The turn it is about, if any (for logs; cli_chat clients get it too).
        id: The idempotency key: every copy of this message carries it (a random one by default).
        reply_to: The platform's id of the message this one answers (Feishu replies in place), if any.
    """

    channel: str
    chat_id: str
    text: str
    level: str = "info"
    session_id: str | None = None
    turn_id: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    reply_to: str | None = None


class OutboundStatus(StrEnum):
    SENT = "sent"  # the sender confirmed it
    NOT_SENT = "not_sent"  # certainly not delivered: the user got nothing
    UNKNOWN = "unknown"  # an attempt failed ambiguously: it may have been delivered


@dataclass(frozen=True, slots=True)
class OutboundResult:
    """How sending one message ended.

    Attributes:
        status: See :class:`OutboundStatus`.
        error: Why it is not ``sent``, else None.
        attempts: Sender calls made.
        permanent: ``not_sent`` because the target refuses it for good (``SinkError(permanent=True)``):
            sending it again cannot help.
    """

    status: OutboundStatus
    error: str | None
    attempts: int
    permanent: bool = False

    @property
    def ok(self) -> bool | None:
        """True when sent, False when certainly not sent, None when unknown (maybe delivered)."""
        if self.status is OutboundStatus.SENT:
            return True
        return None if self.status is OutboundStatus.UNKNOWN else False


OutboundSender = Callable[[OutboundMessage], Awaitable[None]]


class OutboundRefusedError(Exception):
    """The message was not accepted: the chat's lane is full or the dispatcher is closed."""


class OutboundNotSentError(Exception):
    """Raised by a sender that knows nothing reached the target: safe to retry, even if the
    sender is not idempotent."""


_CLOSE = object()  # sentinel put into a lane's queue by close(): finish what is queued, then end


class _Lane:
    __slots__ = ("queue", "task", "maybe_sent")

    def __init__(self) -> None:
        # Unbounded on purpose: submit() enforces queue_size, and close() must always fit _CLOSE.
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task: asyncio.Task | None = None
        #: The current message may have gone out (an attempt started and did not say "not sent").
        self.maybe_sent = False


class OutboundDispatcher:
    """Sends complete messages per chat, in order, with bounded queues, timeouts and retries.

    Args:
        senders: One sender per channel name.
        queue_size: Messages allowed to wait per chat (≥ 1).
        attempts: Sender calls per message at most (≥ 1); a non-idempotent sender is called
            again only after :class:`OutboundNotSentError` (module docstring).
        timeout: Seconds allowed for one sender call.
        retry_delays: Seconds to sleep before the 2nd, 3rd, … attempt (the last one repeats).
        idle_timeout: Seconds an empty lane waits before its task ends.

    Raises:
        ValueError: ``queue_size`` or ``attempts`` < 1.
    """

    def __init__(
        self,
        senders: Mapping[str, OutboundSender],
        *,
        queue_size: int = 64,
        attempts: int = 3,
        timeout: float = 10.0,
        retry_delays: Sequence[float] = (0.2, 0.5, 1.0),
        idle_timeout: float = 30.0,
    ) -> None:
        if queue_size < 1 or attempts < 1:
            raise ValueError("queue_size and attempts must be >= 1")
        self._senders = dict(senders)
        self._queue_size = queue_size
        self._attempts = attempts
        self._timeout = timeout
        self._retry_delays = tuple(retry_delays) or (0.0,)
        self._idle_timeout = idle_timeout
        self._lanes: dict[tuple[str, str], _Lane] = {}
        self._closed = False

    @property
    def lane_count(self) -> int:
        """How many chats have a live lane (a task) right now."""
        return len(self._lanes)

    def submit(self, message: OutboundMessage) -> asyncio.Future[OutboundResult]:
        """Queues ``message`` on its chat's lane (starting the lane's task if needed).

        Returns:
            A future with the :class:`OutboundResult`; it never raises for send failures.
            Cancelling the future does not unsend a message that is already queued.

        Raises:
            OutboundRefusedError: The dispatcher is closed or the chat already has
                ``queue_size`` messages waiting.
        """
        if self._closed:
            raise OutboundRefusedError("the outbound dispatcher is closed")
        key = (message.channel, message.chat_id)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
            lane.task = asyncio.ensure_future(self._run_lane(key, lane))
            lane.task.add_done_callback(self._lane_done)
        elif lane.queue.qsize() >= self._queue_size:
            raise OutboundRefusedError(
                f"{message.channel}:{message.chat_id} has {self._queue_size} messages waiting"
            )
        future: asyncio.Future[OutboundResult] = asyncio.get_running_loop().create_future()
        lane.queue.put_nowait((message, future))
        return future

    async def deliver(self, message: OutboundMessage) -> OutboundResult:
        """Submits ``message`` and waits for its result (bounded by attempts × timeout + delays).

        Returns:
            The result; a refused message is ``not_sent`` with ``attempts=0``. Never raises for
            delivery problems.
        """
        try:
            future = self.submit(message)
        except OutboundRefusedError as exc:
            return OutboundResult(OutboundStatus.NOT_SENT, f"refused: {exc}", attempts=0)
        return await asyncio.shield(future)

    async def close(self, timeout: float = 5.0) -> None:
        """Refuses new messages, lets lanes send what is queued for ``timeout`` s, then cancels.

        Messages still queued then are ``not_sent`` ("dispatcher closed"); one cancelled in the
        middle of a send is ``unknown``. Idempotent.
        """
        self._closed = True
        lanes = list(self._lanes.values())
        for lane in lanes:
            lane.queue.put_nowait(_CLOSE)
        tasks = [lane.task for lane in lanes if lane.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    # -- lanes -------------------------------------------------------------------------------

    async def _run_lane(self, key: tuple[str, str], lane: _Lane) -> None:
        current: asyncio.Future[OutboundResult] | None = None
        try:
            while True:
                try:
                    async with asyncio.timeout(self._idle_timeout):
                        item = await lane.queue.get()
                except TimeoutError:
                    if lane.queue.empty():
                        return  # idle; a later submit() starts a new lane
                    continue
                if item is _CLOSE:
                    return
                message, current = item
                lane.maybe_sent = False
                result = await self._send(message, lane)
                if not current.done():
                    current.set_result(result)
                current = None
        finally:
            # No await between the last queue check and here: a submit() cannot slip in between.
            if self._lanes.get(key) is lane:
                del self._lanes[key]
            self._fail_unsent(lane, current)

    async def _send(self, message: OutboundMessage, lane: _Lane) -> OutboundResult:
        sender = self._senders.get(message.channel)
        if sender is None:
            return OutboundResult(
                OutboundStatus.NOT_SENT, f"no outbound sender for channel {message.channel!r}", attempts=0
            )
        idempotent = getattr(sender, "idempotent", False) is True
        ambiguous = False  # some attempt failed in a way that may have delivered the message
        permanent = False
        error, attempt = "not attempted", 0
        for attempt in range(1, self._attempts + 1):
            if attempt > 1:
                await asyncio.sleep(self._retry_delays[min(attempt - 2, len(self._retry_delays) - 1)])
            lane.maybe_sent = True  # in flight: a cancel from now on leaves the outcome unknown
            try:
                async with asyncio.timeout(self._timeout):
                    await sender(message)
            except Exception as exc:
                permanent = isinstance(exc, SinkError) and exc.permanent
                not_sent = permanent or isinstance(exc, OutboundNotSentError)
                ambiguous = ambiguous or not not_sent
                lane.maybe_sent = ambiguous
                error = (
                    f"send timed out after {self._timeout}s"
                    if isinstance(exc, TimeoutError)
                    else _describe(exc)
                )
                logger.warning(
                    "outbound %s:%s %s attempt %d/%d failed%s: %s",
                    message.channel,
                    message.chat_id,
                    message.id,
                    attempt,
                    self._attempts,
                    "" if not_sent else " (may have been delivered)",
                    error,
                )
                if permanent or (not not_sent and not idempotent):
                    # Permanent: retrying cannot help. Ambiguous: another call could send a copy.
                    break
                continue
            return OutboundResult(OutboundStatus.SENT, None, attempts=attempt)
        if ambiguous:
            return OutboundResult(OutboundStatus.UNKNOWN, error, attempts=attempt)
        return OutboundResult(OutboundStatus.NOT_SENT, error, attempts=attempt, permanent=permanent)

    @staticmethod
    def _fail_unsent(lane: _Lane, current: asyncio.Future[OutboundResult] | None) -> None:
        if current is not None and not current.done():
            # Cancelled while sending it (or between attempts): it may have gone out.
            status = OutboundStatus.UNKNOWN if lane.maybe_sent else OutboundStatus.NOT_SENT
            current.set_result(OutboundResult(status, "dispatcher closed during the send", attempts=0))
        while not lane.queue.empty():
            item = lane.queue.get_nowait()
            if item is not _CLOSE and not item[1].done():
                item[1].set_result(OutboundResult(OutboundStatus.NOT_SENT, "dispatcher closed", attempts=0))

    @staticmethod
    def _lane_done(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("outbound lane crashed", exc_info=task.exception())


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
