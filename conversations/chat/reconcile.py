"""Every connection converges on every turn it watches, even when the layer drops frames.

PROTOCOL §1 "Convergence". A ``ChatConsumer`` keeps a :class:`~delivery.convergence.ConvergenceLedger`
of the turns it expects to see end; :class:`TurnReconciler` runs beside it while the ledger is
not empty, looks up turns that went quiet (``storage.turn_states``) and sends, for each that
ended, whatever end frame the connection has not sent yet:

- the terminal ``turn_updated``, rebuilt from the committed rows and the inbox row's
  ``outcome``/``error`` through the real ``TurnController`` (revision ``RECOVERY_REVISION``
  and up, above any live one, so the credit window drops a late live copy);
- the ``turn_committed`` with the turn's rows, the user row first.

A turn's plain fallback (seed 000 §5) that reaches a connection before its final is resolved the
same way: when storage says the turn ended, the connection gets the final instead, so the user
sees one final, never the fallback after it (``resolve_fallback``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from conversations import storage
from conversations.agent.tool_registry import result_preview
from conversations.models import InboxMessage
from conversations.runtime import notify
from conversations.storage.runner import run_storage
from delivery.convergence import ConvergenceLedger, Due
from delivery.events import ReasoningDelta, TextDelta, TextSegmentFinished, ToolFinished, ToolStarted
from delivery.presentation import PresentationPolicy, serialize_snapshot
from delivery.turn import TurnController, TurnEventError

log = logging.getLogger(__name__)

SendTerminal = Callable[[str, int, str], Awaitable[None]]
"""``(turn_id, revision, payload_json)``: offer a terminal snapshot to the connection."""
SendText = Callable[[str], Awaitable[None]]


def rebuilt_terminal(state: dict) -> tuple[int, str]:
    """``(revision, payload_json)`` of the terminal snapshot of an ended turn, from storage.

    ``state`` is an item of ``storage.turn_states`` with ``messages``. The blocks come from the
    turn's rows (reasoning, answer text, tool calls with their results), replayed through a
    ``TurnController``; the status and error from the inbox row (rows older than the ``outcome``
    column: from the answer's ``completion_status``). Interrupted turns give the restart notice's
    snapshot (``notify.interrupted_notice``), so the two copies are one.
    """
    if state["status"] == InboxMessage.Status.INTERRUPTED:
        notice = notify.interrupted_notice(state)
        return notice.revision, notice.payload
    controller = TurnController(
        state["turn_id"],
        state["session_id"],
        state["message_id"] or "",
        first_revision=notify.RECOVERY_REVISION,
    )
    last_completion = "completed"
    truncated = False

    def apply(event: object) -> None:
        with contextlib.suppress(TurnEventError):  # rows a repair reordered: shown as far as they go
            controller.apply(event)  # type: ignore[arg-type]

    for row in state["messages"]:
        iteration = int(row.get("iteration") or 0)
        if row["role"] == "assistant":
            if row.get("reasoning"):
                apply(ReasoningDelta(iteration, row["reasoning"]))
            if row.get("content"):
                apply(TextDelta(iteration, row["content"]))
                apply(TextSegmentFinished(iteration))
            for call in row.get("tool_calls") or []:
                arguments = call.get("arguments")
                apply(ToolStarted(iteration, str(call.get("id")), str(call.get("name")), arguments or {}))
            last_completion = row.get("completion_status") or "completed"
            truncated = bool(row.get("truncated"))
        elif row["role"] == "tool" and row.get("tool_call_id"):
            apply(
                ToolFinished(
                    iteration,
                    row["tool_call_id"],
                    not row.get("is_error"),
                    result_preview(row.get("content") or ""),
                )
            )
    outcome = state.get("outcome") or {"cancelled": "cancelled", "interrupted": "failed"}.get(
        last_completion, "completed"
    )
    if outcome == InboxMessage.Outcome.CANCELLED:
        controller.cancel(state.get("error") or "stopped")
    elif outcome == InboxMessage.Outcome.FAILED:
        controller.fail(state.get("error") or "This answer failed.")
    else:
        controller.complete(None, truncated=truncated)
    view = PresentationPolicy.websocket().present(controller.snapshot())
    return view.revision, serialize_snapshot(view, view.policy)


def turn_committed_frame(state: dict) -> str:
    """The ``turn_committed`` text of an ended turn (PROTOCOL §1), from ``storage.turn_states``."""
    return notify.dumps(
        {
            "type": "turn_committed",
            "session_id": state["session_id"],
            "history_revision": state["history_revision"],
            "messages": state["messages"],
        }
    )


class TurnReconciler:
    """Looks up the quiet turns of one connection's ledger and sends their missed end frames.

    Args:
        channel, chat_id: The connection's chat (``storage.turn_states`` reads only its rows).
        ledger: The connection's ledger (shared with the consumer, which feeds it).
        send_terminal: Offers a terminal snapshot (through the connection's credit window).
        send_text: Sends a text frame.
    """

    def __init__(
        self,
        channel: str,
        chat_id: str,
        ledger: ConvergenceLedger,
        send_terminal: SendTerminal,
        send_text: SendText,
    ) -> None:
        self.channel = channel
        self.chat_id = chat_id
        self.ledger = ledger
        self.send_terminal = send_terminal
        self.send_text = send_text
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()

    def kick(self) -> None:
        """The ledger changed: make sure the lookup loop runs (it ends when the ledger empties).

        A quiet period of 0 or less (``PICOBOT_RECONCILE_QUIET_SECONDS=0``) turns lookups off.
        """
        if self.ledger.quiet_seconds <= 0:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())
        else:
            self._wake.set()

    async def close(self) -> None:
        """Stop the loop (the connection closed) and wait for it."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while self.ledger:
            wait = self.ledger.next_due_in(time.monotonic())
            if wait is None:
                return
            if wait > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
                continue
            due = self.ledger.due(time.monotonic())
            try:
                await self.check(due)
                self.ledger.postpone(due, time.monotonic())  # never a busy loop on any key
            except Exception:
                log.warning("turn reconciliation of chat %s failed; retrying", self.chat_id, exc_info=True)
                await asyncio.sleep(self.ledger.quiet_seconds)

    async def check(self, due: Due) -> list[dict]:
        """Look ``due`` up and send what ended; returns the states read. Raises storage errors."""
        if not due:
            return []
        states = await run_storage(
            storage.turn_states, self.channel, self.chat_id, list(due.inbox_ids), list(due.turn_ids)
        )
        now = time.monotonic()
        found_inbox = {s["inbox_id"] for s in states}
        found_turns = {s["turn_id"] for s in states if s["turn_id"]}
        for state in states:
            if state["gone"]:
                self.ledger.forget(inbox_id=state["inbox_id"], turn_id=state["turn_id"])
            elif "messages" in state:
                await self._send_end(state)
            else:
                self.ledger.still_running(state["inbox_id"], state["turn_id"], now)
        for inbox_id in set(due.inbox_ids) - found_inbox:  # unknown to storage (purged): stop expecting
            self.ledger.forget(inbox_id=inbox_id)
        for turn_id in set(due.turn_ids) - found_turns:
            self.ledger.forget(turn_id=turn_id)
        return states

    async def _send_end(self, state: dict) -> None:
        turn_id = state["turn_id"]
        if not self.ledger.terminal_sent(turn_id):
            revision, payload = rebuilt_terminal(state)
            await self.send_terminal(turn_id, revision, payload)
            self.ledger.sent_terminal(turn_id)
        if not self.ledger.committed_sent(turn_id) and state["messages"]:
            await self.send_text(turn_committed_frame(state))
            self.ledger.sent_committed(turn_id, state["inbox_id"])
        self.ledger.forget(inbox_id=state["inbox_id"], turn_id=turn_id)

    async def resolve_fallback(self, turn_id: str, fallback_text: str) -> None:
        """A turn's plain fallback arrived: send its final instead when storage says it ended.

        The fallback goes out only when the final is still unknown here (the turn has not ended
        in storage, or storage cannot be read) — and never once the final went out.
        """
        if self.ledger.terminal_sent(turn_id):
            return
        try:
            states = await self.check(Due((), (turn_id,)))
        except Exception:
            log.warning("could not read turn %s; sending its plain fallback", turn_id, exc_info=True)
            states = []
        if self.ledger.terminal_sent(turn_id):
            return
        if not any("messages" in s or s["gone"] for s in states):
            await self.send_text(fallback_text)
