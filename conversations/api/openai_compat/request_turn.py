"""One ``POST /v1/chat/completions`` as a turn (issue 18): its dialog, its message in the durable
inbox, following the turn, and ending it (DESIGN §2, §5: the inbox, executor, tools and commit
path of every turn; the worker is woken through the layer, never called in process).

Without a dialog name the request gets a one-request dialog (``storage.open_request_dialog``,
channel ``API_CHANNEL``: no listing shows it) seeded with its earlier messages and retired once
its turn ended. With one (``X-PicoBot-Dialog`` or the body's ``user``) it is a dialog of the
user's WebUI chat, found by id or title or created with that title; only the last user message
is new, the dialog's own history is used, and the chat's WebSocket clients watch the turn too.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings

from conversations import storage
from conversations.agent.inbound import InboundMessage
from conversations.api.common import CHANNEL, publish
from conversations.api.openai_compat import follow, wire
from conversations.api.openai_compat.wire import WireError
from conversations.models import InboxMessage, now_ms
from conversations.runtime.agent_channel import wake_dialog
from conversations.runtime.notify import session_changed
from conversations.runtime.turn_sinks import API_CHANNEL
from conversations.storage.runner import run_storage
from conversations.usage.writer import flush_usage

log = logging.getLogger(__name__)

DIALOG_HEADER = "X-PicoBot-Dialog"

DEADLINE_MARGIN_SECONDS = 120.0
"""Beyond the turn deadline, how long a request waits for its turn (queued behind another one,
or a worker taking over a dead one's dialog) before it answers 504."""


def budget_error(exc: storage.BudgetExceededError) -> WireError:
    """429 ``insufficient_quota`` with ``Retry-After`` until the budget resets (issue 17)."""
    retry_after = max(1, int(exc.refusal.resets_at.timestamp() - time.time() + 0.999))
    return WireError(
        429,
        str(exc),
        type="insufficient_quota",
        code="budget_exceeded",
        headers={"Retry-After": str(retry_after)},
    )


TURN_ENDINGS = frozenset({"turn_interrupted", "turn_cancelled", "turn_failed"})
"""The error codes of a turn that did not complete (:func:`turn_error`): its worker logged why."""


def turn_error(state: dict) -> WireError | None:
    """The error a turn that did not complete answers with (None when it completed).

    ``state`` is ``storage.request_turn``'s: ``interrupted`` (its process died) → 503
    ``turn_interrupted``; ``cancelled`` (``/stop`` from a client of the dialog) → 409
    ``turn_cancelled``; ``failed`` → 500 ``turn_failed`` with the turn's message (it carries the
    log's reference id).
    """
    if state.get("status") == InboxMessage.Status.INTERRUPTED:
        return WireError(
            503,
            "the turn was interrupted by a server restart; send the request again",
            type=wire.SERVER_ERROR,
            code="turn_interrupted",
        )
    if state.get("outcome") == InboxMessage.Outcome.CANCELLED:
        return WireError(
            409,
            "the turn was stopped before it completed (/stop from a client of this dialog)",
            type=wire.SERVER_ERROR,
            code="turn_cancelled",
        )
    if state.get("outcome") == InboxMessage.Outcome.FAILED:
        return WireError(
            500,
            f"the turn failed: {state.get('error') or 'unknown error'}",
            type=wire.SERVER_ERROR,
            code="turn_failed",
        )
    return None


class RequestTurn:
    """A request's turn from its accepted message to its end (:meth:`open`, then :meth:`follow`,
    then :meth:`end`)."""

    def __init__(self, user: Any, request: wire.CompletionRequest, dialog: Any, retire: bool) -> None:
        self.user = user
        self.request = request
        self.dialog_id: str = dialog.id
        self.channel: str = dialog.channel
        self.chat_id: str = dialog.chat_id
        self.retire = retire
        self.follower = follow.TurnFollower(self.channel, self.chat_id)
        self.inbox_id = ""
        self.completion_id = ""
        self.created = int(time.time())
        self.usage: dict | None = None
        self._ended = False

    @classmethod
    async def open(
        cls, user: Any, request: wire.CompletionRequest, preset: str, name: str | None
    ) -> RequestTurn:
        """Make the dialog, join its chat's group, accept the message, wake a worker.

        Raises:
            WireError: 400 for a dialog name that cannot be a title, 404 for a dialog id of
                none of the user's dialogs, 429 for a full inbox or a used-up budget.
        """
        if name:
            try:
                dialog, created = await run_storage(storage.named_dialog, user, CHANNEL, str(user.pk), name)
            except ValueError as exc:
                raise WireError(400, f"{DIALOG_HEADER}: {exc}", param=DIALOG_HEADER) from None
            except storage.NotFoundError:
                raise WireError(
                    404,
                    f"{DIALOG_HEADER}: no such dialog of yours",
                    param=DIALOG_HEADER,
                    code="dialog_not_found",
                ) from None
            if created:
                await publish(CHANNEL, str(user.pk), session_changed(dialog, active=False))
            turn = cls(user, request, dialog, retire=False)
        else:
            chat_id = f"{user.pk}.{secrets.token_hex(6)}"  # a chat per request: its own layer group
            dialog = await run_storage(
                storage.open_request_dialog, user, API_CHANNEL, chat_id, list(request.history)
            )
            turn = cls(user, request, dialog, retire=True)
        await turn.follower.open()  # before the message exists: no snapshot of its turn is missed
        try:
            await turn._accept(preset)
        except BaseException:
            await turn.follower.close()
            if turn.retire:
                await run_storage(storage.retire_request_dialog, turn.dialog_id)
            raise
        return turn

    async def _accept(self, preset: str) -> None:
        inbound = InboundMessage(
            channel=self.channel,
            chat_id=self.chat_id,
            sender_id=str(self.user.pk),
            content=self.request.prompt,
            received_at=now_ms(),
            session_id=self.dialog_id,
        )
        try:
            accepted = await run_storage(
                storage.accept_message,
                self.user,
                self.channel,
                self.chat_id,
                self.request.prompt,
                session_id=self.dialog_id,
                received_at=inbound.received_at,
                source=inbound.source() | {"via": "openai"},
                model=preset,
                instructions=self.request.instructions,
            )
        except storage.BudgetExceededError as exc:
            raise budget_error(exc) from None
        except storage.InboxFullError as exc:
            raise WireError(
                429,
                f"{exc}; send again once some have run",
                type="requests",
                code="inbox_full",
                headers={"Retry-After": "10"},
            ) from None
        self.inbox_id = accepted.inbox_id
        self.completion_id = f"chatcmpl-{accepted.inbox_id.replace('-', '')}"
        try:
            await wake_dialog(self.dialog_id)
        except Exception:  # the inbox scan finds it anyway (DESIGN §2)
            log.warning("could not wake a worker for %s; the inbox scan will", self.dialog_id, exc_info=True)

    def deadline(self) -> float:
        """The loop time after which the request stops waiting for its turn."""
        return asyncio.get_running_loop().time() + settings.PICOBOT.turn_timeout + DEADLINE_MARGIN_SECONDS

    async def follow(self) -> AsyncIterator[follow.TurnUpdate]:
        """The turn's updates until it ended (``TurnFollower.follow``); a terminal snapshot's
        ``usage`` is kept. Raises TimeoutError past :meth:`deadline`."""
        async for update in self.follower.follow(self.inbox_id, deadline=self.deadline()):
            if update.snapshot is not None and update.snapshot.get("usage"):
                self.usage = update.snapshot["usage"]
            yield update

    async def turn_usage(self, state: dict) -> dict:
        """The turn's tokens: the terminal snapshot's (the provider's), else its usage rows
        (this process's writer flushed first; another process's may come later: 0 then)."""
        if self.usage and any(self.usage.values()):
            return self.usage
        turn_id = state.get("turn_id")
        if not turn_id:
            return {}
        await flush_usage(timeout=1.0)
        return await run_storage(storage.turn_usage, turn_id)

    async def end(self, ended: bool) -> None:
        """Leave the group; retire a one-request dialog whose turn ended, or abandon a turn whose
        client left (``follow.abandon``). Idempotent."""
        if self._ended:
            return
        self._ended = True
        if not ended or self.retire:
            # In a task of its own, started before any await: a client that closes right after
            # [DONE] cancels this coroutine, and the one-request dialog must still be retired.
            follow.abandon(self.dialog_id, self.inbox_id, retire=self.retire)
        await self.follower.close()

    def end_from_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        """:meth:`end` (not ended) scheduled on ``loop`` from another thread (a response's
        ``close``, called when a stream was never iterated)."""
        if not self._ended:
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.end(False)))
