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

from conversations import notify, storage
from conversations.agent_loop import AgentLoop, AgentResult, TurnMessage
from conversations.history import build_turn_input, reasoning_of
from conversations.models import Message
from conversations.storage_runner import run_storage
from conversations.tools.registry import ToolFatalError
from delivery.failures import record_delivery_failure
from delivery.platforms.cli_chat import CliChatSink
from delivery.presentation import PresentationPolicy
from delivery.sinks import TurnSink
from delivery.turn import TurnController
from delivery.turn_delivery import DeliveryOutcome, FailureReport, TurnDelivery
from providers.errors import ProviderError, RequestBlockedError
from providers.messages import Message as ProviderMessage
from providers.messages import ToolUseBlock

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


CANCELLED_TOOL_RESULT = "Error: the turn was stopped before this tool call returned a result."
# Seconds the executor waits for a turn's terminal delivery (the coordinator's own retries are
# shorter); past it delivery counts as failed and the one plain fallback goes out.
DELIVERY_WAIT_SECONDS = 35.0  # above the coordinator's worst case (3 finish attempts of 10 s + delays)
SHUTDOWN_DELIVERY_WAIT_SECONDS = 3.0


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


_FAILURE_LEADS = {
    "server_error": "The model provider had a server error",
    "overloaded": "The model provider is overloaded",
    "rate_limited": "The model provider is rate limiting us",
    "authentication": "The model provider refused our credentials",
    "context_overflow": "The conversation is too long for the model",
    "timeout": "The model provider timed out",
    "connection": "The model provider could not be reached",
    "truncated": "The model provider's answer was cut off",
}


def provider_failure_lead(error: ProviderError) -> str:
    """The user-facing start of a provider failure message, naming its kind (and HTTP status).

    A 500/502/504 reads as a server error and only 503/529 as "overloaded" (issue 3): the
    wording follows the error type, so the two are never confused.
    """
    lead = _FAILURE_LEADS.get(error.kind, "The model provider failed")
    status = f", HTTP {error.http_status}" if error.http_status and error.http_status != 200 else ""
    return f"{lead} ({error.kind}{status})"


def _error_ref() -> str:
    return secrets.token_hex(4)


def _tool_call_row(call: ToolUseBlock) -> dict:
    """A ``tool_calls`` column item; ``raw_arguments`` only for arguments that were not a JSON
    object (server only: ``storage.message_to_protocol`` leaves it out)."""
    row = {"id": call.id, "name": call.name, "arguments": call.arguments}
    if call.raw_arguments is not None:
        row["raw_arguments"] = call.raw_arguments
    return row


def turn_rows(messages: list[TurnMessage], turn_id: str, reply_message_id: str, status: str) -> list[dict]:
    """Message field dicts for ``storage.commit_turn``; the last assistant row gets the reply id."""
    rows: list[dict] = []
    last_assistant = max((i for i, m in enumerate(messages) if m.message.role == "assistant"), default=None)
    for index, item in enumerate(messages):
        msg = item.message
        if msg.role == "assistant":
            row = {
                "role": Message.Role.ASSISTANT,
                "content": msg.text,
                "reasoning_content": reasoning_of(msg),
                "provider_state": msg.provider_state,
                "tool_calls": [_tool_call_row(c) for c in msg.tool_calls],
                "completion_status": status if index == last_assistant else Message.CompletionStatus.COMPLETED,
            }
            if index == last_assistant:
                row["id"] = reply_message_id
        else:
            block = msg.content[0]
            row = {
                "role": Message.Role.TOOL,
                "content": block.content,
                "tool_call_id": block.tool_call_id,
                "tool_name": block.tool_name,
                "is_error": block.is_error,
            }
        row["turn_id"] = turn_id
        row["iteration"] = item.iteration
        rows.append(row)
    return rows


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
        """Cancel the running turn (if any) with ``reason`` as its error; False when none runs."""
        running = self.running
        if running is None or running.task is None or running.task.done():
            return False
        self.cancel_reason = reason
        running.task.cancel()
        return True

    def poke(self) -> None:
        """New input may be queued: look again before going idle."""
        self.poked.set()

    async def run(self) -> None:
        """Recover interrupted turns, then run queued turns until the inbox is empty."""
        interrupted = await run_storage(storage.interrupt_started, self.dialog_id, self.worker.worker_id, self.epoch)
        for turn in interrupted:
            await notify.publish_interrupted(turn)
        while not self.lease_lost and not self.worker.stopping:
            self.poked.clear()
            start = await run_storage(storage.start_next_turn, self.dialog_id, self.worker.worker_id, self.epoch)
            if start is None:
                if self.poked.is_set():
                    continue
                return
            await self.run_turn(start)

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
            )
        except storage.LeaseLostError:
            log.warning("turn %s: lease lost before commit; another worker owns %s", start.turn_id, self.dialog_id)
            self.lease_lost = True
            controller.cancel("another worker took over this dialog")
            return None
        except Exception:
            ref = _error_ref()
            log.exception("turn %s commit failed (ref %s)", start.turn_id, ref)
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
            return None
        # The commit checked our epoch in the DB: the lease is proven, whatever the local clock said.
        self.extend_lease(float(settings.PICOBOT["LEASE_SECONDS"]), since=asked_at)
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


def complete_tool_chains(messages: list[TurnMessage]) -> list[TurnMessage]:
    """``messages`` with every tool call followed by its result, an error result where none came.

    A turn cancelled while its tools ran must still commit a valid chain: providers reject a
    history where an assistant tool call has no result (seed 003 §14.1).
    """
    results = {m.message.content[0].tool_call_id: m for m in messages if m.message.role == "tool"}
    out: list[TurnMessage] = []
    for item in messages:
        if item.message.role == "tool":
            continue
        out.append(item)
        for call in item.message.tool_calls if item.message.role == "assistant" else []:
            missing = TurnMessage(
                item.iteration,
                ProviderMessage.tool_result(call.id, CANCELLED_TOOL_RESULT, is_error=True, tool_name=call.name),
            )
            out.append(results.get(call.id) or missing)
    return out
