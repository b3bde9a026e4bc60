"""Per-dialog executor: runs a dialog's inbox in order while this worker holds its lease.

One ``DialogExecutor`` task per live dialog (DESIGN §5): take the next queued inbox row (it enters
history), build the input, run the agent loop under a ``TurnController`` whose snapshots a
``DeliveryCoordinator`` delivers to the chat, commit the turn's rows in one transaction, and only
then publish the terminal snapshot and the ``turn_committed`` delta (seed 003 §14, seed 000 §11).

The executor reaches its worker only through a ``TurnContext`` (``turn_context``). How a turn
ended and what it commits: ``turn_outcome``; what the chat is told when storage or delivery
fails: ``turn_alerts``; where the turn's output goes: ``turn_sinks``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError

from conversations import storage
from conversations.agent.failures import (
    TurnFailure,
    TurnFailureKind,
    TurnFailurePresenter,
    log_failure,
)
from conversations.agent.loop import (
    AgentResult,
)
from conversations.context.runtime_context import prefetch_turn_input
from conversations.runtime import notify
from conversations.runtime.session_turns import adopt_start, remember_commit, start_turn
from conversations.runtime.turn_alerts import (
    alert_storage_failing,
    record_failed_delivery,
    report_refused_commit,
)
from conversations.runtime.turn_assembly import assemble_turn, turn_scope
from conversations.runtime.turn_context import TurnContext
from conversations.runtime.turn_outcome import await_turn, contained, turn_ending
from conversations.runtime.turn_sinks import presentation_for_turn
from conversations.storage.runner import run_storage
from conversations.tools.memory import recall_for_turn
from delivery.turn import TurnController
from delivery.turn_delivery import DeliveryOutcome, TurnDelivery
from picobot_site.metrics import instruments
from providers.metering import call_scope

log = logging.getLogger(__name__)


@dataclass
class RunningTurn:
    """The live turn of a dialog, as the worker exposes it (replay to new clients, /stop)."""

    turn_id: str
    channel: str
    chat_id: str
    controller: TurnController
    task: asyncio.Task | None = None
    inbox_id: str = ""
    """The turn's inbox row (where its checkpoint is saved: ``runtime.checkpoints``)."""
    preset: str = ""
    """The model preset answering the turn (the dialog's, or a fallback's once it took over)."""
    live: bool = True
    """False for a final-only turn (automated input): new connections get no running snapshot."""

    def answered_by(self, preset: str) -> None:
        """A fallback took over the turn (``providers.fallback``): the commit records ``preset``."""
        self.preset = preset


# Seconds the executor waits for a turn's terminal delivery (the coordinator's own retries are
# shorter); past it delivery counts as failed and the one plain fallback goes out.
DELIVERY_WAIT_SECONDS = 35.0  # above the coordinator's worst case (3 finish attempts of 10 s + delays)
SHUTDOWN_DELIVERY_WAIT_SECONDS = 3.0

# The cancel reason of a stale turn (seed 003 §8.3); never shown: its owner publishes nothing more.
STALE_TURN_REASON = "another worker took over this dialog"


class DialogExecutor:
    """Runs one dialog's queued turns serially while holding its lease epoch."""

    presenter = TurnFailurePresenter()
    """Words every turn failure for the user (seed 000 §13)."""

    def __init__(self, context: TurnContext, dialog_id: str, epoch: int) -> None:
        self.context = context
        self.dialog_id = dialog_id
        self.epoch = epoch
        self.poked = asyncio.Event()
        self.running: RunningTurn | None = None
        self.lease_lost = False
        self.cancel_reason = "stopped"
        self.confirmed_until = 0.0
        self.storage_failed = False
        self.pending_cancel: str | None = None

    def lease_confirmed(self) -> bool:
        """Whether snapshots may go out: not lost, and proven within the last lease period
        (by the keeper's last renewal, the claim or the commit). While storage cannot confirm it,
        the turn goes on unseen instead of showing what a stale owner may be doing (seed 003
        §8.3); a commit proves it again, so the terminal snapshot always follows a commit."""
        if self.lease_lost:
            return False
        return time.monotonic() < max(self.confirmed_until, self.context.lease_keeper.confirmed_until)

    async def verify_lease(self) -> bool:
        """The agent loop's stale-state check (before a provider call, after a tool batch):
        True while the lease is confirmed; when storage could not confirm it lately, waits for
        the keeper's next word instead of guessing — lost (False) or renewed (True). A busy
        process is never taken for a stale one, nor a stale one calls the provider again."""
        while not self.lease_lost:
            if self.lease_confirmed():
                return True
            await self.context.lease_keeper.next_round()
        return False

    def confirm_lease(self) -> None:
        """The database just proved this epoch (a claim or a commit renewed it)."""
        self.confirmed_until = time.monotonic() + settings.PICOBOT.lease_seconds

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

    @staticmethod
    def prefetch(start: storage.TurnStart) -> dict:
        """What the turn's input builder reads (its dialog state and recalled memory), read in
        the storage trip that starts the turn (``session_turns.begin_turn``)."""
        return prefetch_turn_input(start, recall_for_turn)

    async def run(
        self, interrupted: list[dict] | None = None, *, first: storage.TurnStart | None = None
    ) -> None:
        """Recover interrupted turns, then run queued turns until the inbox is empty.

        ``interrupted``: what ``storage.claim_dialog`` already marked (else it is done here).
        ``first``: the first turn, already started in the claim's storage trip
        (``session_turns.claim_and_begin``; its runtime session is brought up to date here).

        A storage failure that outlasts the retries (seed 004 §4.4) ends this run with an error in
        the log and a notice to the chat; the queued messages stay queued (they were acked, so
        they are durable) and the inbox scan starts the dialog again later.
        """
        try:
            if interrupted is None:
                interrupted = await run_storage(
                    storage.interrupt_started, self.dialog_id, self.context.worker_id, self.epoch
                )
        except DatabaseError as exc:
            await alert_storage_failing(self.context, self.dialog_id, exc)
            return
        told = [t for t in interrupted if t["turn_id"] in self.context.reported_turns]
        for turn in interrupted:
            if turn not in told:
                committed = None
                with contextlib.suppress(DatabaseError):  # without it, the reconciler sends it later
                    committed = await run_storage(storage.interrupted_commit, turn["inbox_id"])
                await notify.publish_interrupted(turn, committed)
                instruments.record_turn("interrupted")
        if told:  # their failure was already shown (a commit that storage refused): no restart notice
            with contextlib.suppress(DatabaseError):
                await run_storage(storage.mark_notices_sent, [t["inbox_id"] for t in told])
            self.context.reported_turns.difference_update(t["turn_id"] for t in told)
        # A turn the claim already started runs even if a shutdown began meanwhile (it is then
        # ended as cancelled, never left ``started``); the claim starts none once it has begun.
        while first is not None or (
            not self.lease_lost and not self.context.stopping and not self.storage_failed
        ):
            self.poked.clear()
            try:
                if first is not None:
                    start, first = (
                        await adopt_start(self.context.sessions, first, self.context.worker_id, self.epoch),
                        None,
                    )
                else:
                    start = await self._start_turn()
            except DatabaseError as exc:
                await alert_storage_failing(self.context, self.dialog_id, exc)
                return
            if start is None:
                if self.poked.is_set():
                    continue
                break
            try:
                await self.run_turn(start)
            except BaseException:
                self.context.sessions.evict(self.dialog_id)  # unknown state: the next turn reloads
                raise
        if self.lease_lost:
            self.context.sessions.evict(self.dialog_id)

    async def _start_turn(self) -> storage.TurnStart | None:
        """The next queued turn, its history through the runtime session (``session_turns.start_turn``)."""
        return await start_turn(
            self.context.sessions, self.dialog_id, self.context.worker_id, self.epoch, prefetch=self.prefetch
        )

    def _remember_commit(self, commit: storage.CommitResult) -> None:
        remember_commit(self.context.sessions, self.dialog_id, commit)

    async def run_turn(self, start: storage.TurnStart) -> None:
        """One turn end to end; every failure is typed, shown and never reported completed."""
        self.cancel_reason = "stopped"
        controller = TurnController(start.turn_id, start.dialog_id, start.reply_message_id)
        presentation = presentation_for_turn(start)
        delivery = await TurnDelivery.open(
            controller,
            lambda: self.context.open_sink(start),
            presentation,
            self.context.outbound,
            channel=start.channel,
            chat_id=start.chat_id,
            is_current=self.lease_confirmed,  # the stale-state check before every publish (seed 003 §8.3)
            pace=self.context.pace,  # a busy process sends fewer snapshots, not a queue of them
        )
        self.running = running = RunningTurn(
            start.turn_id,
            start.channel,
            start.chat_id,
            controller,
            inbox_id=start.inbox_id,
            live=presentation.live,
        )
        try:
            # Every log line of the turn names it (picobot_site.log_format; issue 17).
            with call_scope(turn_scope(start)):
                commit = await self._run_and_commit(start, running)
                # The terminal snapshot goes out after the commit, and turn_committed after it
                # (PROTOCOL §1); a failed delivery gets its one plain fallback here (seed 000 §5).
                outcome = await self._settle(delivery)
            if commit is not None:
                await notify.publish_turn_committed(start.channel, start.chat_id, start.dialog_id, commit)
                self.context.schedule_title(start.dialog_id)  # background; never delays the next turn
            if outcome.failure is not None:
                await record_failed_delivery(start, outcome.failure)
        finally:
            delivery.cancel()  # only does something when the executor itself is torn down
            self.running = None

    async def _settle(self, delivery: TurnDelivery) -> DeliveryOutcome:
        """Wait for the final delivery; a shutdown cuts the wait short, never the fallback.

        A hung sink would otherwise hold the turn past ``stop()``'s bound, and the executor would
        be cancelled with neither the final nor its fallback sent (seed 000 §5.1).
        """
        if self.context.stopping:
            return await delivery.settle(timeout=SHUTDOWN_DELIVERY_WAIT_SECONDS)
        settling = asyncio.ensure_future(delivery.settle(timeout=DELIVERY_WAIT_SECONDS))
        stopping = asyncio.ensure_future(self.context.stopped.wait())
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

    async def _run_and_commit(
        self, start: storage.TurnStart, running: RunningTurn
    ) -> storage.CommitResult | None:
        """Run the agent loop under the turn's deadline, then commit; None when nothing committed.

        Whatever the loop raises becomes a typed failure (``turn_outcome.await_turn``, seed 000
        §13), except a cancellation of this executor itself, ``KeyboardInterrupt`` and
        ``SystemExit``, which go on. The executor then goes on with the next message.
        """
        config = settings.PICOBOT
        turn = assemble_turn(self.context, start, running, is_current=self.verify_lease)
        # Created inside run_turn's call scope: the task copies it (usage rows, log lines).
        task = asyncio.ensure_future(contained(turn.work))
        running.task = task
        if self.pending_cancel is not None:  # stopped while the turn was being set up
            self.cancel_reason, self.pending_cancel = self.pending_cancel, None
            task.cancel()
        end = await await_turn(task, config.turn_timeout)
        result = end.result
        if result is None:  # cancelled, failed or timed out: keep what the loop finished, plus the partial
            result = turn.loop.result
            # A stop keeps what was shown, reasoning alone too (agent/README.md "Cancel").
            result.partial = turn.loop.partial_message(reasoning_alone=end.cancelled)
        return await self._finish(start, running.controller, result, end.cancelled, end.failure)

    async def _finish(
        self,
        start: storage.TurnStart,
        controller: TurnController,
        result: AgentResult,
        cancelled: bool,
        failure: TurnFailure | None,
    ) -> storage.CommitResult | None:
        """Commit what the turn produced, then end the controller; None when nothing committed.

        What is committed and shown: ``turn_outcome.turn_ending`` (seed 003 §14). A failed commit
        is never ``completed`` and the user is told the preview was not saved (§14.2). Stale
        state (§8.3): a turn whose owner lost the dialog —
        seen by the loop, by the lease keeper or by the commit's epoch check — is cancelled
        silently: nothing committed, nothing shown. A commit that succeeded is always announced.
        """
        if result.stale or self.lease_lost:  # the generation check before the commit (seed 003 §8.3)
            return self._drop_stale(start, controller, "before its commit")
        ending = turn_ending(
            start,
            result,
            cancelled=cancelled,
            failure=failure,
            cancel_reason=self.cancel_reason,
            presenter=self.presenter,
        )
        if ending.failure is not None:
            log_failure(log, start.turn_id, ending.failure)
        controller.begin_finalizing()
        try:
            commit = await run_storage(
                storage.commit_turn,
                self.dialog_id,
                self.context.worker_id,
                self.epoch,
                start.inbox_id,
                ending.rows,
                usage=ending.usage,
                error=ending.shown_error,
                outcome=ending.outcome,
                model=self.running.preset if self.running is not None else "",
                lease_ms=int(settings.PICOBOT.lease_seconds * 1000),
            )
        except storage.LeaseLostError:  # the storage's epoch check: another worker owns the dialog
            return self._drop_stale(start, controller, "at its commit")
        except Exception as exc:
            await self._commit_failed(
                start, controller, TurnFailure.from_exception(TurnFailureKind.TURN_PERSISTENCE, exc)
            )
            return None
        # The commit proved our epoch and renewed the lease in the same transaction: what it
        # committed is announced, however long it took (a slow commit is not a stale owner).
        # Confirmed from now: the commit set the expiry inside its transaction, after any wait for
        # the storage queue or a lock (from the time before the call, a commit slower than the
        # lease would never count as confirmed and its final would be dropped as stale).
        self.confirm_lease()
        self._remember_commit(commit)
        instruments.record_turn(str(ending.outcome))
        if cancelled:
            controller.cancel(self.cancel_reason)
        elif ending.failure is not None:
            controller.fail(ending.error)
        else:
            controller.complete(ending.usage, truncated=ending.truncated)
        return commit

    def _drop_stale(self, start: storage.TurnStart, controller: TurnController, when: str) -> None:
        """Cancel a stale turn silently (seed 003 §8.3): its owner lost the dialog.

        ``lease_lost`` makes ``lease_confirmed()`` false first, so the coordinator publishes no terminal
        snapshot; the executor stops and the new owner reports the turn (``interrupt_started``:
        its inbox row still reads ``started``). A deleted dialog is a new generation too
        (``storage.delete_dialog`` bumps the lease epoch and ends the row itself): nobody reports
        it. Always returns None (nothing to publish).
        """
        log.warning(
            "turn %s: stale %s; %s was deleted or another worker owns it (nothing published)",
            start.turn_id,
            when,
            self.dialog_id,
        )
        self.lease_lost = True
        self.context.sessions.evict(self.dialog_id)
        controller.cancel(STALE_TURN_REASON)
        return None

    async def _commit_failed(
        self, start: storage.TurnStart, controller: TurnController, failure: TurnFailure
    ) -> None:
        """A commit storage refused (seed 003 §14.2): failed, never completed, and told once."""
        log_failure(log, start.turn_id, failure)
        instruments.record_turn("failed")
        self.context.sessions.evict(self.dialog_id)  # the DB state is unknown: reload next turn
        controller.fail(self.presenter.present(failure))
        await report_refused_commit(self.context, start, self.epoch, failure, self.presenter)
        # Told once: this run ends (storage is down; the inbox scan comes back later), and the
        # row that may still read ``started`` is not announced as a restart's victim.
        self.context.reported_turns.add(start.turn_id)
        self.storage_failed = True
