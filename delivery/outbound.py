"""The outbound dispatcher: complete, independent messages, ordered per chat (seed 003 §9.2).

Live turn snapshots go through a :class:`~delivery.coordinator.DeliveryCoordinator`; everything
else a chat receives as a message of its own — the one plain fallback after a failed turn
delivery (seed 000 §5.2), later scheduled deliveries — goes through an
:class:`OutboundDispatcher`:

- one lane per ``(channel, chat_id)``: messages of one chat are sent one at a time, in the order
  they were submitted; a slow or failing chat never delays another;
- each lane holds at most ``queue_size`` waiting messages; past that :meth:`submit` refuses
  (:class:`OutboundRefusedError`) instead of growing without bound;
- each send is bounded by ``timeout`` and retried at most ``attempts`` times (a
  :class:`~delivery.sinks.SinkError` with ``permanent=True`` stops at once);
- lanes are tasks the dispatcher owns: an idle lane ends after ``idle_timeout`` seconds, and
  :meth:`close` drains or cancels them and awaits them all.

A sender is an ``async (OutboundMessage) -> None`` per channel that raises on failure; it must not
report "not sent" as success.

Pure module (asyncio only): no Django, Channels or httpx imports.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from delivery.sinks import SinkError

__all__ = ["OutboundDispatcher", "OutboundMessage", "OutboundRefusedError", "OutboundResult", "OutboundSender"]

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
        turn_id: The turn it is about, if any (for logs).
    """

    channel: str
    chat_id: str
    text: str
    level: str = "info"
    session_id: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True, slots=True)
class OutboundResult:
    """How sending one message ended: ``ok``; else ``error``. ``attempts`` = sender calls made."""

    ok: bool
    error: str | None
    attempts: int


OutboundSender = Callable[[OutboundMessage], Awaitable[None]]


class OutboundRefusedError(Exception):
    """The message was not accepted: the chat's lane is full or the dispatcher is closed."""


_CLOSE = object()  # sentinel put into a lane's queue by close(): finish what is queued, then end


class _Lane:
    __slots__ = ("queue", "task")

    def __init__(self) -> None:
        # Unbounded on purpose: submit() enforces queue_size, and close() must always fit _CLOSE.
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task: asyncio.Task | None = None


class OutboundDispatcher:
    """Sends complete messages per chat, in order, with bounded queues, timeouts and retries.

    Args:
        senders: One sender per channel name.
        queue_size: Messages allowed to wait per chat (≥ 1).
        attempts: Sender calls per message at most (≥ 1).
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
            raise OutboundRefusedError(f"{message.channel}:{message.chat_id} has {self._queue_size} messages waiting")
        future: asyncio.Future[OutboundResult] = asyncio.get_running_loop().create_future()
        lane.queue.put_nowait((message, future))
        return future

    async def deliver(self, message: OutboundMessage) -> OutboundResult:
        """Submits ``message`` and waits for its result (bounded by attempts × timeout + delays).

        Returns:
            The result; a refused message is ``ok=False`` with ``attempts=0``. Never raises for
            delivery problems.
        """
        try:
            future = self.submit(message)
        except OutboundRefusedError as exc:
            return OutboundResult(ok=False, error=f"refused: {exc}", attempts=0)
        return await asyncio.shield(future)

    async def close(self, timeout: float = 5.0) -> None:
        """Refuses new messages, lets lanes send what is queued for ``timeout`` s, then cancels.

        Messages still unsent then get ``ok=False`` ("dispatcher closed"). Idempotent.
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
                result = await self._send(message)
                if not current.done():
                    current.set_result(result)
                current = None
        finally:
            # No await between the last queue check and here: a submit() cannot slip in between.
            if self._lanes.get(key) is lane:
                del self._lanes[key]
            self._fail_unsent(lane, current)

    async def _send(self, message: OutboundMessage) -> OutboundResult:
        sender = self._senders.get(message.channel)
        if sender is None:
            return OutboundResult(ok=False, error=f"no outbound sender for channel {message.channel!r}", attempts=0)
        error = "not attempted"
        for attempt in range(1, self._attempts + 1):
            if attempt > 1:
                await asyncio.sleep(self._retry_delays[min(attempt - 2, len(self._retry_delays) - 1)])
            try:
                async with asyncio.timeout(self._timeout):
                    await sender(message)
            except Exception as exc:
                error = f"send timed out after {self._timeout}s" if isinstance(exc, TimeoutError) else _describe(exc)
                logger.warning(
                    "outbound %s:%s attempt %d/%d failed: %s",
                    message.channel,
                    message.chat_id,
                    attempt,
                    self._attempts,
                    error,
                )
                if isinstance(exc, SinkError) and exc.permanent:
                    return OutboundResult(ok=False, error=error, attempts=attempt)
                continue
            return OutboundResult(ok=True, error=None, attempts=attempt)
        return OutboundResult(ok=False, error=error, attempts=self._attempts)

    @staticmethod
    def _fail_unsent(lane: _Lane, current: asyncio.Future[OutboundResult] | None) -> None:
        unsent = [current] if current is not None else []
        while not lane.queue.empty():
            item = lane.queue.get_nowait()
            if item is not _CLOSE:
                unsent.append(item[1])
        for future in unsent:
            if not future.done():
                future.set_result(OutboundResult(ok=False, error="dispatcher closed", attempts=0))

    @staticmethod
    def _lane_done(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("outbound lane crashed", exc_info=task.exception())


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
