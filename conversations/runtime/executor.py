"""Per-dialog executor: runs a dialog's inbox in order while this worker holds its lease.

One ``DialogExecutor`` task per live dialog (DESIGN §5): take the next queued inbox row (it enters
history), build the input, run the agent loop under a ``TurnController`` whose snapshots a
``DeliveryCoordinator`` delivers to the chat, commit the turn's rows in one transaction, and only
then publish the terminal snapshot and the ``turn_committed`` delta (seed 003 §14, seed 000 §11).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DatabaseError

from conversations import storage
from conversations.agent.failures import (
    TurnFailedError,
    TurnFailure,
    TurnFailureKind,
    TurnFailurePresenter,
    describe_exception,
    log_failure,
    log_safe,
)
from conversations.agent.loop import (
    DEFAULT_MAX_CALLS_PER_RESPONSE,
    DEFAULT_MAX_TURN_OUTPUT_CHARS,
    AgentLoop,
    AgentResult,
)
from conversations.context.turn_input import (
    ContextPreparationError,
    Publish,
    TurnInputBuilder,
    overflow_mid_turn_message,
    prefetch_turn_input,
    run_with_overflow_recovery,
)
from conversations.models import InboxMessage, Message
from conversations.runtime import notify
from conversations.runtime.session_turns import adopt_start, remember_commit, start_turn
from conversations.runtime.turn_rows import complete_tool_chains, turn_rows
from conversations.storage.runner import run_storage
from conversations.tools.memory import recall_for_turn, recall_memories
from conversations.tools.registry import ToolContext, ToolFatalError
from delivery.failures import record_delivery_failure
from delivery.platforms.cli_chat import CliChatSink
from delivery.presentation import PresentationPolicy
from delivery.sinks import TurnSink
from delivery.turn import TurnController
from delivery.turn_delivery import DeliveryOutcome, FailureReport, TurnDelivery
from providers.errors import ContextOverflowError

if TYPE_CHECKING:
    from conversations.runtime.worker import AgentWorker

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
        inbox_id=start.inbox_id,
    )


def presentation_for(channel: str) -> PresentationPolicy:
    """The presentation policy of a platform (seed 003 §11 defaults)."""
    return PresentationPolicy.websocket() if channel == "cli_chat" else PresentationPolicy.external()


def _error_ref() -> str:
    return secrets.token_hex(4)


# The cancel reason of a stale turn (seed 003 §8.3); never shown: its owner publishes nothing more.
STALE_TURN_REASON = "another worker took over this dialog"


class TurnCrashedError(Exception):
    """The turn's task raised a ``BaseException`` that is neither a cancellation nor a process exit
    (``GeneratorExit``, a ``BaseExceptionGroup`` out of a TaskGroup, a library's own subclass);
    the original is its ``__cause__``."""


async def _contained(turn: Callable[[], Awaitable[AgentResult]]) -> AgentResult:
    """``await turn()``, with any stray ``BaseException`` turned into :class:`TurnCrashedError`.

    ``turn`` is called only once this runs: a task cancelled before its first step (a ``/stop``
    while the turn was set up) then leaves no coroutine that was never awaited.

    The executor awaits the turn's task; a task that ended with ``GeneratorExit`` would have it
    *thrown* into the executor's coroutine, which can then never await again ("coroutine ignored
    GeneratorExit") and the executor dies — the turn later reads "interrupted by a server
    restart". A cancellation, ``KeyboardInterrupt`` and ``SystemExit`` go on unchanged.
    """
    try:
        return await turn()
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
        raise
    except Exception:
        raise
    except BaseException as exc:
        raise TurnCrashedError(f"the turn raised {type(exc).__name__}: {exc}") from exc


class DialogExecutor:
    """Runs one dialog's queued turns serially while holding its lease epoch."""

    presenter = TurnFailurePresenter()
    """Words every turn failure for the user (seed 000 §13)."""

    def __init__(self, worker: AgentWorker, dialog_id: str, epoch: int) -> None:
        self.worker = worker
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
        return time.monotonic() < max(self.confirmed_until, self.worker.lease_keeper.confirmed_until)

    async def verify_lease(self) -> bool:
        """The agent loop's stale-state check (before a provider call, after a tool batch):
        True while the lease is confirmed; when storage could not confirm it lately, waits for
        the keeper's next word instead of guessing — lost (False) or renewed (True). A busy
        process is never taken for a stale one, nor a stale one calls the provider again."""
        while not self.lease_lost:
            if self.lease_confirmed():
                return True
            await self.worker.lease_keeper.next_round()
        return False

    def confirm_lease(self) -> None:
        """The database just proved this epoch (a claim or a commit renewed it)."""
        self.confirmed_until = time.monotonic() + float(settings.PICOBOT["LEASE_SECONDS"])

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

    async def run(self, interrupted: list[dict] | None = None, *, first: storage.TurnStart | None = None) -> None:
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
                    storage.interrupt_started, self.dialog_id, self.worker.worker_id, self.epoch
                )
        except DatabaseError as exc:
            await self._storage_alert(exc)
            return
        told = [t for t in interrupted if t["turn_id"] in self.worker.reported_turns]
        for turn in interrupted:
            if turn not in told:
                committed = None
                with contextlib.suppress(DatabaseError):  # without it, the reconciler sends it later
                    committed = await run_storage(storage.interrupted_commit, turn["inbox_id"])
                await notify.publish_interrupted(turn, committed)
        if told:  # their failure was already shown (a commit that storage refused): no restart notice
            with contextlib.suppress(DatabaseError):
                await run_storage(storage.mark_notices_sent, [t["inbox_id"] for t in told])
            self.worker.reported_turns.difference_update(t["turn_id"] for t in told)
        # A turn the claim already started runs even if a shutdown began meanwhile (it is then
        # ended as cancelled, never left ``started``); the claim starts none once it has begun.
        while first is not None or (not self.lease_lost and not self.worker.stopping and not self.storage_failed):
            self.poked.clear()
            try:
                if first is not None:
                    start, first = await adopt_start(self.worker.sessions, first, self.worker.worker_id, self.epoch), None
                else:
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
        log.error(
            "dialog %s: storage failed after retries (ref %s): %s",
            self.dialog_id, ref, log_safe(describe_exception(exc)),
        )
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
        return await start_turn(
            self.worker.sessions, self.dialog_id, self.worker.worker_id, self.epoch, prefetch=self.prefetch
        )

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
            is_current=self.lease_confirmed,  # the stale-state check before every publish (seed 003 §8.3)
            pace=self.worker.load.pace,  # a busy process sends fewer snapshots, not a queue of them
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
        """Run the agent loop under the turn's deadline, then commit; None when nothing committed.

        Whatever the loop raises becomes a typed failure (seed 000 §13) — any ``Exception``, and
        any other ``BaseException`` (``GeneratorExit``, a ``BaseExceptionGroup``: ``_contained``)
        as an internal one — except a cancellation of this executor itself, ``KeyboardInterrupt``
        and ``SystemExit``, which go on. The executor then goes on with the next message.
        """
        config = settings.PICOBOT
        # One input path (seed 000 §7.1): compaction under the `compacting` phase, and one rebuild
        # after a context overflow (§7.2), all inside the task that /stop and the deadline cancel.
        builder = TurnInputBuilder.from_settings(
            self.worker.provider,
            tools=self.worker.tools.definitions(),
            memory_recall=recall_memories,
            phase=running.controller,
        )
        loop = AgentLoop(
            self.worker.provider,
            self.worker.tools.bind(ToolContext(start.dialog_id, start.channel, start.chat_id)),
            running.controller.apply,
            max_iterations=config["MAX_ITERATIONS"],
            tool_timeout=config["TOOL_TIMEOUT"],
            is_current=self.verify_lease,  # before each provider call and after each tool batch (seed 003 §8.3)
            fit=builder.fit,  # every later request is fitted to the window (seed 000 §7.2)
            max_calls_per_response=config.get("MAX_TOOL_CALLS_PER_RESPONSE", DEFAULT_MAX_CALLS_PER_RESPONSE),
            max_output_chars=config.get("MAX_TURN_OUTPUT_CHARS", DEFAULT_MAX_TURN_OUTPUT_CHARS),
        )
        task = asyncio.ensure_future(
            _contained(
                functools.partial(run_with_overflow_recovery, builder, start, loop.run, publish=self._context_notice(start))
            )
        )
        running.task = task
        if self.pending_cancel is not None:  # stopped while the turn was being set up
            self.cancel_reason, self.pending_cancel = self.pending_cancel, None
            task.cancel()
        result: AgentResult | None = None
        cancelled = False
        failure: TurnFailure | None = None
        deadline = asyncio.timeout(config["TURN_TIMEOUT"])
        try:
            async with deadline:
                result = await task
        except asyncio.CancelledError:
            if not task.cancelled() or asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
            cancelled = True  # /stop cancelled the loop task, not this executor
        # Typed failures (seed 000 §13): _finish presents them; only the log gets their cause.
        except TimeoutError as exc:
            if deadline.expired():  # the turn's own deadline, not a TimeoutError from inside it
                failure = TurnFailure.of(
                    TurnFailureKind.TIMEOUT,
                    user_message=f"The turn took longer than {config['TURN_TIMEOUT']:g} s and was stopped",
                    detail=f"TURN_TIMEOUT of {config['TURN_TIMEOUT']:g} s passed",
                )
            else:
                failure = TurnFailure.from_exception(TurnFailureKind.INTERNAL, exc)
        except ToolFatalError as exc:  # the tool's own words may hold anything: the log only
            failure = TurnFailure.from_exception(TurnFailureKind.TOOL, exc, traceback=False)
        except ContextPreparationError as exc:
            failure = TurnFailure.of(
                TurnFailureKind.CONTEXT_PREPARATION, user_message=exc.message, detail=describe_exception(exc)
            )
            result = AgentResult()  # nothing was shown: no input fitted, or it overflowed twice
        except TurnFailedError as exc:  # a step of the turn that typed its own failure
            failure = exc.failure
        except Exception as exc:
            failure = TurnFailure.from_exception(TurnFailureKind.INTERNAL, exc)
        except (KeyboardInterrupt, SystemExit):
            raise  # the process is going down (the event loop re-raises them anyway)
        except BaseException as exc:  # not expected (``_contained``), but never the executor's end
            if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
            failure = TurnFailure.from_exception(TurnFailureKind.INTERNAL, exc)
        if result is None:  # cancelled, failed or timed out: keep what the loop finished, plus the partial
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
        failure: TurnFailure | None,
    ) -> storage.CommitResult | None:
        """Commit what the turn produced, then end the controller; None when nothing committed.

        Cancel (seed 003 §14.1): the shown partial answer is kept as ``cancelled`` (no answer text
        shown: no assistant row), tool calls without a result get an error result. Failure
        (§14.2): the partial is kept as ``interrupted``; a failed commit is never ``completed``
        and the user is told the preview was not saved. Every failure is typed and worded by
        the presenter (seed 000 §13). Stale state (§8.3): a turn whose owner lost the dialog —
        seen by the loop, by the lease keeper or by the commit's epoch check — is cancelled
        silently: nothing committed, nothing shown. A commit that succeeded is always announced.
        """
        if result.stale or self.lease_lost:  # the generation check before the commit (seed 003 §8.3)
            return self._drop_stale(start, controller, "before its commit")
        messages = complete_tool_chains(result.messages)
        status = Message.CompletionStatus.COMPLETED
        if isinstance(result.error, ContextOverflowError):  # not recovered: too long even fitted (§7.2)
            failure = replace(
                TurnFailure.provider(result.error),
                user_message=overflow_mid_turn_message(shortened=result.refused_shortened),
            )
        elif result.error is not None:
            failure = TurnFailure.provider(result.error)
        if failure is not None:
            log_failure(log, start.turn_id, failure)
        if result.partial is not None:
            # Shown text of an unfinished response is kept, marked (seed 003 §14.1, §14.2).
            messages.append(result.partial)
            status = Message.CompletionStatus.CANCELLED if cancelled else Message.CompletionStatus.INTERRUPTED
        error = self.presenter.present(failure) if failure is not None else ""
        # What the terminal snapshot will show, kept with the commit (``conversations.chat.reconcile``).
        if cancelled:
            outcome, shown_error = InboxMessage.Outcome.CANCELLED, self.cancel_reason
        elif failure is not None:
            outcome, shown_error = InboxMessage.Outcome.FAILED, error
        else:
            outcome, shown_error = InboxMessage.Outcome.COMPLETED, ""
        controller.begin_finalizing()
        rows = turn_rows(messages, start.turn_id, start.reply_message_id, status)
        usage = result.usage.to_dict()
        try:
            commit = await run_storage(
                storage.commit_turn,
                self.dialog_id,
                self.worker.worker_id,
                self.epoch,
                start.inbox_id,
                rows,
                usage=usage,
                error=shown_error,
                outcome=outcome,
                model=self.worker.provider.model or self.worker.provider.name,
                lease_ms=int(float(settings.PICOBOT["LEASE_SECONDS"]) * 1000),
            )
        except storage.LeaseLostError:  # the storage's epoch check: another worker owns the dialog
            return self._drop_stale(start, controller, "at its commit")
        except Exception as exc:
            await self._commit_failed(start, controller, TurnFailure.from_exception(TurnFailureKind.TURN_PERSISTENCE, exc))
            return None
        # The commit proved our epoch and renewed the lease in the same transaction: what it
        # committed is announced, however long it took (a slow commit is not a stale owner).
        # Confirmed from now: the commit set the expiry inside its transaction, after any wait for
        # the storage queue or a lock (from the time before the call, a commit slower than the
        # lease would never count as confirmed and its final would be dropped as stale).
        self.confirm_lease()
        self._remember_commit(commit)
        if cancelled:
            controller.cancel(self.cancel_reason)
        elif failure is not None:
            controller.fail(error)
        else:
            controller.complete(usage)
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
            start.turn_id, when, self.dialog_id,
        )
        self.lease_lost = True
        self.worker.sessions.evict(self.dialog_id)
        controller.cancel(STALE_TURN_REASON)
        return None

    async def _commit_failed(self, start: storage.TurnStart, controller: TurnController, failure: TurnFailure) -> None:
        """A commit storage refused (seed 003 §14.2): failed, never completed, and told once."""
        log_failure(log, start.turn_id, failure)
        self.worker.sessions.evict(self.dialog_id)  # the DB state is unknown: reload next turn
        controller.fail(self.presenter.present(failure))
        try:
            await run_storage(
                storage.abandon_turn, self.dialog_id, self.worker.worker_id, self.epoch, start.inbox_id,
                f"commit failed (ref {failure.ref})",
            )
        except Exception as exc:  # a storage error: redacted, like every failure's detail
            log.error(
                "turn %s: could not mark its inbox row done either (ref %s): %s",
                start.turn_id, failure.ref, log_safe(describe_exception(exc)),
            )
        notice = self.presenter.notice(failure)
        if notice is not None:
            try:
                await notify.publish_notification(start.channel, start.chat_id, "error", notice, session_id=start.dialog_id)
            except Exception:
                log.exception("turn %s: could not send the not-saved notice (ref %s)", start.turn_id, failure.ref)
        # Told once: this run ends (storage is down; the inbox scan comes back later), and the
        # row that may still read ``started`` is not announced as a restart's victim.
        self.worker.reported_turns.add(start.turn_id)
        self.storage_failed = True

    @staticmethod
    def _context_notice(start: storage.TurnStart) -> Publish:
        """Publishes a context-preparation notice (a failed compaction, left-out messages) to the chat."""

        async def publish(text: str) -> None:
            await notify.publish_notification(start.channel, start.chat_id, "warning", text, session_id=start.dialog_id)

        return publish
