"""Per-dialog executor: runs a dialog's inbox in order while this worker holds its lease.

One ``DialogExecutor`` task per live dialog (DESIGN §5): take the next queued inbox row (it enters
history), build the input, run the agent loop under a ``TurnController`` whose snapshots a
``DeliveryCoordinator`` delivers to the chat, commit the turn's rows in one transaction, and only
then publish the terminal snapshot and the ``turn_committed`` delta (seed 003 §14, seed 000 §11).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DatabaseError

from conversations import notify, storage
from conversations.agent_loop import AgentLoop, AgentResult
from conversations.history import build_turn_input
from conversations.models import Message
from conversations.session_turns import remember_commit, start_turn
from conversations.storage_runner import run_storage
from conversations.tools.registry import ToolFatalError
from conversations.turn_rows import complete_tool_chains, provider_failure_lead, turn_rows
from delivery.failures import record_delivery_failure
from delivery.platforms.cli_chat import CliChatSink
from delivery.presentation import PresentationPolicy
from delivery.sinks import TurnSink
from delivery.turn import TurnController
from delivery.turn_delivery import DeliveryOutcome, FailureReport, TurnDelivery
from providers.errors import RequestBlockedError

if TYPE_CHECKING:
    from conversations.worker import AgentWorker

log = logging.getLogger(__name__)


@dataclass
class RunningTurn:
    """The live turn of a dialog, as the worker exposes it (replay to new clients, /stop)."""

    turn_id: str
    channel: str
    chat_id: str
    controller: TurnController
    task: asyncio.Task | None = None


# Seconds the executor waits for a turn's terminal delivery (the coordinator's own retries are
# shorter); past it delivery counts as failed and the one plain fallback goes out.
DELIVERY_WAIT_SECONDS = 35.0  # above the coordinator's worst case (3 finish attempts of 10 s + delays)
SHUTDOWN_DELIVERY_WAIT_SECONDS = 3.0
# Seconds between two "storage is failing" notices of one dialog (the inbox scan retries often).
STORAGE_ALERT_INTERVAL = 60.0


def split_session_id(session_id: str) -> tuple[str, str]:
    """``(channel, chat_id)`` of a unified id ``"{channel}:{chat_id}:{dialog_id}"`` (seed 004 §2.2)."""
    channel, _, rest = session_id.partition(":")
    return channel, rest.rpartition(":")[0]


async def open_cli_chat_sink(start: storage.TurnStart) -> TurnSink:
    """The default sink factory: publish the turn to the chat's WebSocket group (seed 003 §10.2)."""
    return CliChatSink(
        get_channel_layer(),
        notify.group_for(start.channel, start.chat_id),
        min_interval=settings.PICOBOT["WS_SNAPSHOT_INTERVAL_MS"] / 1000,
    )


def presentation_for(channel: str) -> PresentationPolicy:
    """The presentation policy of a platform (seed 003 §11 defaults)."""
    return PresentationPolicy.websocket() if channel == "cli_chat" else PresentationPolicy.external()


def _error_ref() -> str:
    return secrets.token_hex(4)


class DialogExecutor:
    """Runs one dialog's queued turns serially while holding its lease epoch."""

    def __init__(self, worker: AgentWorker, dialog_id: str, epoch: int) -> None:
        self.worker = worker
        self.dialog_id = dialog_id
        self.epoch = epoch
        self.poked = asyncio.Event()
        self.running: RunningTurn | None = None
        self.lease_lost = False
        self.cancel_reason = "stopped"
        self.lease_valid_until = 0.0
        self.storage_failed = False
        self.pending_cancel: str | None = None

    def extend_lease(self, lease_seconds: float, since: float | None = None) -> None:
        """The lease was claimed, renewed or proven by a commit: ours for ``lease_seconds``.

        ``since`` is the monotonic time taken *before* the DB call that set the expiry, so the
        local deadline never outlives the one in the database.
        """
        self.lease_valid_until = (time.monotonic() if since is None else since) + lease_seconds

    def holds_lease(self) -> bool:
        """Whether this executor may still publish: the lease was neither lost nor left to expire.

        A local check, no I/O: another worker can take the dialog only after the lease expired
        without renewal, so an owner whose renewals stopped succeeding stops publishing by then.
        """
        return not self.lease_lost and time.monotonic() < self.lease_valid_until

    def cancel_turn(self, reason: str) -> bool:
        """Cancel the running turn with ``reason`` as its error; False when it already ended.

        A turn that has started (its row reads ``started``) but whose agent loop does not exist
        yet is cancelled the moment the loop starts: a ``/stop`` in that window is never lost.
        """
        running = self.running
        if running is not None and running.task is not None:
            if running.task.done():
                return False
            self.cancel_reason = reason
            running.task.cancel()
            return True
        self.pending_cancel = reason
        return True

    def poke(self) -> None:
        """New input may be queued: look again before going idle."""
        self.poked.set()

    async def run(self) -> None:
        """Recover interrupted turns, then run queued turns until the inbox is empty.

        A storage failure that outlasts the retries (seed 004 §4.4) ends this run with an error in
        the log and a notice to the chat; the queued messages stay queued (they were acked, so
        they are durable) and the inbox scan starts the dialog again later.
        """
        try:
            interrupted = await run_storage(
                storage.interrupt_started, self.dialog_id, self.worker.worker_id, self.epoch
            )
        except DatabaseError as exc:
            await self._storage_alert(exc)
            return
        told = [t for t in interrupted if t["turn_id"] in self.worker.reported_turns]
        for turn in interrupted:
            if turn not in told:
                await notify.publish_interrupted(turn)
        if told:  # their failure was already shown (a commit that storage refused): no restart notice
            with contextlib.suppress(DatabaseError):
                await run_storage(storage.mark_notices_sent, [t["inbox_id"] for t in told])
            self.worker.reported_turns.difference_update(t["turn_id"] for t in told)
        while not self.lease_lost and not self.worker.stopping and not self.storage_failed:
            self.poked.clear()
            try:
                start = await self._start_turn()
            except DatabaseError as exc:
                await self._storage_alert(exc)
                return
            if start is None:
                if self.poked.is_set():
                    continue
                break
            try:
                await self.run_turn(start)
            except BaseException:
                self.worker.sessions.evict(self.dialog_id)  # unknown state: the next turn reloads
                raise
        if self.lease_lost:
            self.worker.sessions.evict(self.dialog_id)

    async def _storage_alert(self, exc: Exception) -> None:
        """Tell the chat that storage fails (at most once per ``STORAGE_ALERT_INTERVAL`` s per dialog)."""
        ref = _error_ref()
        log.error("dialog %s: storage failed after retries (ref %s): %s", self.dialog_id, ref, exc)
        now = time.monotonic()
        alerts = self.worker.storage_alerts
        if now - alerts.get(self.dialog_id, -STORAGE_ALERT_INTERVAL) < STORAGE_ALERT_INTERVAL:
            return
        alerts[self.dialog_id] = now
        channel, chat_id = split_session_id(self.dialog_id)
        try:
            await notify.publish_notification(
                channel,
                chat_id,
                "error",
                f"Storage is failing right now (ref {ref}). Nothing you sent is lost: messages waiting "
                f"in this dialog run when it recovers.",
                session_id=self.dialog_id,
            )
        except Exception:
            log.exception("dialog %s: could not send the storage alert (ref %s)", self.dialog_id, ref)

    async def _start_turn(self) -> storage.TurnStart | None:
        """The next queued turn, its history through the runtime session (``session_turns.start_turn``)."""
        return await start_turn(self.worker.sessions, self.dialog_id, self.worker.worker_id, self.epoch)

    def _remember_commit(self, commit: storage.CommitResult) -> None:
        remember_commit(self.worker.sessions, self.dialog_id, commit)

    async def run_turn(self, start: storage.TurnStart) -> None:
        """One turn end to end; every failure is typed, shown and never reported completed."""
        self.cancel_reason = "stopped"
        controller = TurnController(start.turn_id, start.dialog_id, start.reply_message_id)
        delivery = await TurnDelivery.open(
            controller,
            lambda: self.worker.open_sink(start),
            presentation_for(start.channel),
            self.worker.outbound,
            channel=start.channel,
            chat_id=start.chat_id,
            is_current=self.holds_lease,  # the stale-state check before every publish (seed 003 §8.3)
        )
        self.running = running = RunningTurn(start.turn_id, start.channel, start.chat_id, controller)
        try:
            commit = await self._run_and_commit(start, running)
            # The terminal snapshot goes out after the commit, and turn_committed after it (PROTOCOL §1);
            # a failed delivery gets its one plain fallback here (seed 000 §5).
            outcome = await self._settle(delivery)
            if commit is not None:
                await notify.publish_turn_committed(start.channel, start.chat_id, start.dialog_id, commit)
                self.worker.titles.schedule(start.dialog_id)  # background; never delays the next turn
            if outcome.failure is not None:
                await self._record_delivery_failure(start, outcome.failure)
        finally:
            delivery.cancel()  # only does something when the executor itself is torn down
            self.running = None

    async def _settle(self, delivery: TurnDelivery) -> DeliveryOutcome:
        """Wait for the final delivery; a shutdown cuts the wait short, never the fallback.

        A hung sink would otherwise hold the turn past ``stop()``'s bound, and the executor would
        be cancelled with neither the final nor its fallback sent (seed 000 §5.1).
        """
        if self.worker.stopping:
            return await delivery.settle(timeout=SHUTDOWN_DELIVERY_WAIT_SECONDS)
        settling = asyncio.ensure_future(delivery.settle(timeout=DELIVERY_WAIT_SECONDS))
        stopping = asyncio.ensure_future(self.worker.stopped.wait())
        try:
            await asyncio.wait({settling, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if settling.done():
            return settling.result()
        settling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await settling
        return await delivery.settle(timeout=SHUTDOWN_DELIVERY_WAIT_SECONDS)

    async def _run_and_commit(self, start: storage.TurnStart, running: RunningTurn) -> storage.CommitResult | None:
        """Run the agent loop under the turn's deadline, then commit; None when nothing committed."""
        config = settings.PICOBOT
        loop = AgentLoop(
            self.worker.provider,
            self.worker.tools,
            running.controller.apply,
            max_iterations=config["MAX_ITERATIONS"],
            tool_timeout=config["TOOL_TIMEOUT"],
        )
        messages = build_turn_input(
            config["SYSTEM_PROMPT"], start.history, runtime_context=self._runtime_context(start), summary=start.summary
        )
        task = asyncio.ensure_future(loop.run(messages))
        running.task = task
        if self.pending_cancel is not None:  # stopped while the turn was being set up
            self.cancel_reason, self.pending_cancel = self.pending_cancel, None
            task.cancel()
        result: AgentResult | None = None
        cancelled = False
        failure: str | None = None
        try:
            async with asyncio.timeout(config["TURN_TIMEOUT"]):
                result = await task
        except asyncio.CancelledError:
            if not task.cancelled() or asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
            cancelled = True  # /stop cancelled the loop task, not this executor
        except TimeoutError:
            failure = f"The turn took longer than {config['TURN_TIMEOUT']:g} s and was stopped."
        except ToolFatalError as exc:
            failure = f"A tool failed and the turn cannot go on: {exc}"
        except Exception:
            ref = _error_ref()
            log.exception("turn %s crashed (ref %s)", start.turn_id, ref)
            failure = f"Internal error (ref {ref})."
        if result is None:  # cancelled or timed out: keep what the loop finished, plus the partial
            result = loop.result
            result.partial = loop.partial_message()
        return await self._finish(start, running.controller, result, cancelled, failure)

    async def _record_delivery_failure(self, start: storage.TurnStart, failure: FailureReport) -> None:
        """One ``DeliveryFailure`` row for the admin; bookkeeping never breaks the dialog."""
        try:
            await run_storage(
                record_delivery_failure,
                channel=start.channel,
                chat_id=start.chat_id,
                dialog_id=start.dialog_id,
                turn_id=start.turn_id,
                stage=failure.stage,
                error=failure.error,
                attempts=failure.attempts,
            )
        except Exception:
            log.exception("turn %s: could not record its delivery failure (%s)", start.turn_id, failure.error)

    async def _finish(
        self,
        start: storage.TurnStart,
        controller: TurnController,
        result: AgentResult,
        cancelled: bool,
        failure: str | None,
    ) -> storage.CommitResult | None:
        """Commit what the turn produced, then end the controller; None when nothing committed."""
        messages = complete_tool_chains(result.messages)
        status = Message.CompletionStatus.COMPLETED
        if result.error is not None:
            ref = _error_ref()
            log.warning("turn %s provider error %s (ref %s)", start.turn_id, result.error.kind, ref)
            if isinstance(result.error, RequestBlockedError):
                failure = f"The request was blocked before reaching the model: {result.error.message} (ref {ref})"
            else:
                failure = f"{provider_failure_lead(result.error)}: {result.error.message} (ref {ref})"
        if result.partial is not None:
            # Shown text of an unfinished response is kept, marked (seed 003 §14.1, §14.2).
            messages.append(result.partial)
            status = Message.CompletionStatus.CANCELLED if cancelled else Message.CompletionStatus.INTERRUPTED
        controller.begin_finalizing()
        rows = turn_rows(messages, start.turn_id, start.reply_message_id, status)
        usage = result.usage.to_dict()
        asked_at = time.monotonic()
        try:
            commit = await run_storage(
                storage.commit_turn,
                self.dialog_id,
                self.worker.worker_id,
                self.epoch,
                start.inbox_id,
                rows,
                usage=usage,
                error=failure or "",
                model=self.worker.provider.model or self.worker.provider.name,
            )
        except storage.LeaseLostError:
            log.warning("turn %s: lease lost before commit; another worker owns %s", start.turn_id, self.dialog_id)
            self.worker.sessions.evict(self.dialog_id)
            self.lease_lost = True
            controller.cancel("another worker took over this dialog")
            return None
        except Exception:
            ref = _error_ref()
            log.exception("turn %s commit failed (ref %s)", start.turn_id, ref)
            self.worker.sessions.evict(self.dialog_id)  # the DB state is unknown: reload next turn
            controller.fail(f"The answer could not be saved (ref {ref}).")
            try:
                await run_storage(
                    storage.abandon_turn, self.dialog_id, self.worker.worker_id, self.epoch, start.inbox_id,
                    f"commit failed (ref {ref})",
                )
            except Exception:
                log.exception("turn %s: could not mark its inbox row done either (ref %s)", start.turn_id, ref)
            await notify.publish_notification(
                start.channel, start.chat_id, "error", f"Storage failed; this turn was not saved (ref {ref}).",
                session_id=start.dialog_id,
            )
            # Told once: this run ends (storage is down; the inbox scan comes back later), and the
            # row that may still read ``started`` is not announced as a restart's victim.
            self.worker.reported_turns.add(start.turn_id)
            self.storage_failed = True
            return None
        # The commit checked our epoch in the DB: the lease is proven, whatever the local clock said.
        self.extend_lease(float(settings.PICOBOT["LEASE_SECONDS"]), since=asked_at)
        self._remember_commit(commit)
        if cancelled:
            controller.cancel(self.cancel_reason)
        elif failure:
            controller.fail(failure)
        else:
            controller.complete(usage)
        return commit

    @staticmethod
    def _runtime_context(start: storage.TurnStart) -> str:
        now = datetime.now(UTC).isoformat(timespec="seconds")
        return f"time={now}; channel={start.channel}; dialog_title={start.title!r}"
