"""The cli_chat WebSocket consumer: PROTOCOL.md §1 (WebUI, TUI and scripts).

Thin glue: validate a frame, call a storage service, shape the answer. User messages are accepted
into the dialog's durable inbox, acknowledged, and the agent worker is woken through the channel
layer — the same path in the embedded and the scale-out mode (DESIGN §2). Live snapshots arrive
from the executor's sink as pre-serialised JSON and go out through the ``seen`` credit window.
Client frames are parsed by ``frames``; stop requests are ``stops``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError

from conversations import storage
from conversations.agent.inbound import InboundMessage
from conversations.agent.media import MediaError, validate_media
from conversations.auth import throttle
from conversations.chat.commands import (
    announce,
    handle_command,
    idle_reset_notice,
    is_stop_command,
    welcome,
)
from conversations.chat.frames import (
    MAX_CLIENT_MSG_ID,
    MAX_HISTORY_LIMIT,
    MAX_SEQ,
    FrameError,
    message_content,
    optional_int,
    optional_str,
    parse_frame,
    placeholder_snapshot,
    sessions_request,
)
from conversations.chat.ready_notices import KeptNoticesSent, mark_received, send_pending_notices
from conversations.chat.reconcile import TurnReconciler
from conversations.chat.stops import StopRequests
from conversations.models import now_ms
from conversations.runtime.agent_channel import WORKERS_GROUP, wake_dialog
from conversations.runtime.consumer_base import LoopDispatch
from conversations.runtime.notify import dumps, session_changed
from conversations.runtime.provider import provider_info
from conversations.runtime.sessions import session_manager
from conversations.storage.dialog_reads import sessions_page
from conversations.storage.runner import run_storage
from delivery.convergence import ConvergenceLedger
from delivery.flow import SnapshotCreditWindow
from delivery.frame_budget import fit_frame
from delivery.groups import chat_group
from delivery.platforms.cli_chat import turn_updated_frame
from picobot_site.metrics import instruments

log = logging.getLogger(__name__)

CHANNEL = "cli_chat"
PROTOCOL_VERSION = 1
MAX_OUTGOING_FRAME_BYTES = 8 * 1024 * 1024
"""Bytes one server frame may have: under ``serve``'s WebSocket payload limit (9 MiB), which
Daphne enforces by closing the connection; a larger frame is cut to fit (``delivery.frame_budget``)."""
_FIT_CHECK_CHARS = MAX_OUTGOING_FRAME_BYTES // 4  # a text this short cannot be over (≤ 4 bytes a char)
CLOSE_UNAUTHORIZED = 4401
CLOSE_TOO_MANY_FAILURES = 4429  # = conversations.auth.websocket.CLOSE_TOO_MANY_FAILURES
# DESIGN §2 asks for 1001, but Daphne's WebSocket stack (autobahn) refuses to send any server close
# code other than 1000 and 3000–4999, so a shutdown closes normally with a reason; clients reconnect.
CLOSE_SERVER_SHUTDOWN = 1000


class RateLimitedError(Exception):
    """The user sent more messages than ``PICOBOT_USER_MESSAGES_PER_MINUTE``; ``retry_after`` s."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"rate limited for {retry_after} s")
        self.retry_after = retry_after


def process_connections_group() -> str:
    """This process's group of WebSocket connections (``serve`` closes them cleanly at exit).

    Per process, so that a shutdown never closes the connections of another server sharing the
    Redis layer.
    """
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())[:40]
    return f"picobot.connections.{host}.{os.getpid()}"


class ChatConsumer(LoopDispatch, AsyncWebsocketConsumer):
    """One WebSocket connection of a user's cli_chat chat (the chat is the user)."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        retry_after = self.scope.get("auth_retry_after")
        if retry_after is not None:
            # Issue 16: a clear code that says when, so a client does not reconnect hot on it.
            reason = throttle.too_many_failures_message(retry_after)
            await self.accept()
            await self.send_frame(
                {"type": "error", "code": "too_many_requests", "message": reason, "retry_after": retry_after}
            )
            await self.close(code=CLOSE_TOO_MANY_FAILURES, reason=reason)
            return
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.send_frame(
                {"type": "error", "code": "unauthorized", "message": "authentication required"}
            )
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        self.user = user
        self.chat_id = str(user.pk)
        self.group = chat_group(CHANNEL, self.chat_id)
        self.window = SnapshotCreditWindow()
        # Turns this connection expects to see end, looked up when the layer dropped their end.
        self.ledger = ConvergenceLedger(settings.PICOBOT.reconcile_quiet_seconds)
        self.reconciler = TurnReconciler(
            CHANNEL, self.chat_id, self.ledger, self._offer_terminal, self._send_text
        )
        self.watchdogs: set[asyncio.Task] = set()
        self.kept_notices_sent = KeptNoticesSent()
        self.stops = StopRequests(
            user, CHANNEL, self.chat_id, self.channel_name, self.send_frame, self.watchdogs
        )
        self.groups_joined = [self.group, process_connections_group()]
        try:
            for group in self.groups_joined:
                await self.channel_layer.group_add(group, self.channel_name)
            await self.accept()
            await self._send_ready(user)
        except BaseException:
            # A connect that dies half way (DB or layer down) leaves no group membership behind.
            for group in self.groups_joined:
                with contextlib.suppress(Exception):
                    await self.channel_layer.group_discard(group, self.channel_name)
            raise
        # Started last, once connected: a failed connect must not leave it re-adding a dead channel.
        self.refresher = asyncio.ensure_future(self._refresh_groups())
        instruments.WEBSOCKETS_OPEN.inc()
        self.counted_open = True  # decremented once, in disconnect

    async def _send_ready(self, user: Any) -> None:
        # A first dialog made here gets no welcome: the WebUI/TUI show their own empty-dialog hint,
        # and every dialog made by a command or an idle reset is welcomed (seed 004 §6.2).
        active = await run_storage(storage.active_dialog, user, CHANNEL, self.chat_id)
        running = await run_storage(storage.running_inbox, CHANNEL, self.chat_id)
        await self.send_frame(
            {
                "type": "ready",
                "user": user.get_username(),
                "chat_id": self.chat_id,
                "active_session_id": active.id,
                "protocol": PROTOCOL_VERSION,
                "provider": provider_info(),
                "running": [placeholder_snapshot(item) for item in running],
            }
        )
        await send_pending_notices(
            CHANNEL, self.chat_id, self._offer_terminal, self._send_text, self.kept_notices_sent
        )
        now = time.monotonic()
        for item in running:
            self.ledger.saw_running(item["turn_id"], now)
        if running:
            self.reconciler.kick()
            # The placeholders carry revision 0; the owning worker sends the real latest snapshot.
            await self.channel_layer.group_send(
                WORKERS_GROUP,
                {
                    "type": "turns.replay",
                    "channel": CHANNEL,
                    "chat_id": self.chat_id,
                    "reply_channel": self.channel_name,
                },
            )

    async def disconnect(self, code: int) -> None:
        if getattr(self, "counted_open", False):
            self.counted_open = False
            instruments.WEBSOCKETS_OPEN.dec()
        for watchdog in list(getattr(self, "watchdogs", ())):
            watchdog.cancel()
        reconciler = getattr(self, "reconciler", None)
        if reconciler is not None:
            await reconciler.close()
        refresher = getattr(self, "refresher", None)
        if refresher is not None:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher
        for group in getattr(self, "groups_joined", []):
            with contextlib.suppress(Exception):  # a layer that is down forgets nothing we need
                await self.channel_layer.group_discard(group, self.channel_name)

    async def _refresh_groups(self) -> None:
        """Re-join our groups periodically: layers drop members after ``group_expiry`` (24 h)."""
        interval = settings.PICOBOT.group_refresh_seconds
        while True:
            await asyncio.sleep(interval)
            try:
                for group in self.groups_joined:
                    await self.channel_layer.group_add(group, self.channel_name)
            except Exception:
                log.exception("could not refresh group membership; retrying next interval")

    # --- client → server ----------------------------------------------------------------------
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        client_msg_id = None
        try:
            frame = parse_frame(text_data)
            client_msg_id = (
                frame.get("client_msg_id") if isinstance(frame.get("client_msg_id"), str) else None
            )
            handler = getattr(self, f"on_{frame['type']}", None)
            if handler is None:
                raise FrameError("unknown_type", f"unknown frame type {frame['type']!r}")
            await handler(frame)
        except FrameError as exc:
            await self.send_error(exc.code, exc.message, client_msg_id=exc.client_msg_id or client_msg_id)
        except storage.NotFoundError as exc:
            await self.send_error("not_found", str(exc), client_msg_id=client_msg_id)
        except storage.InboxFullError as exc:
            await self.send_error("inbox_full", str(exc), client_msg_id=client_msg_id)
        except storage.BudgetExceededError as exc:  # issue 17: nothing stored, the text stays the user's
            await self.send_frame(budget_error_frame(exc, client_msg_id))
        except RateLimitedError as exc:
            await self.send_frame(
                {
                    "type": "error",
                    "code": "rate_limited",
                    "message": throttle.too_many_messages_message(exc.retry_after),
                    "retry_after": exc.retry_after,
                    **({"client_msg_id": client_msg_id} if client_msg_id else {}),
                }
            )
        except Exception:
            ref = secrets.token_hex(4)
            log.exception("chat frame failed (ref %s)", ref)
            await self.send_error(
                "internal_error",
                "the server could not handle this request",
                ref=ref,
                client_msg_id=client_msg_id,
            )

    async def on_message(self, frame: dict) -> None:
        received_at = now_ms()  # the user row's created_at (seed 000 §10.2)
        client_msg_id = optional_str(frame, "client_msg_id", MAX_CLIENT_MSG_ID)
        content = message_content(frame, client_msg_id)
        if not is_stop_command(content):  # /stop is a control, like the stop frame: never limited
            retry_after = throttle.take_message(self.user.pk)
            if retry_after is not None:  # refused, nothing stored: the client may send it again
                raise RateLimitedError(retry_after)
        session_id = optional_str(frame, "session_id", 255)
        media = None
        if frame.get("media") is not None:
            try:
                media = validate_media(frame["media"])
            except MediaError as exc:
                raise FrameError("invalid_media", str(exc), client_msg_id) from None
        if content.lstrip().startswith("/"):
            await handle_command(self, CHANNEL, content, session_id)
            return
        inbound = InboundMessage(
            channel=CHANNEL,
            chat_id=self.chat_id,
            sender_id=self.chat_id,
            content=content,
            received_at=received_at,
            media=tuple(media or ()),
            session_id=session_id,
            client_msg_id=client_msg_id,
        )
        accepted = await run_storage(storage.accept_inbound, self.user, inbound)
        if accepted.created_dialog is not None:
            # A dialog made for this message (idle reset, DESIGN §6): announced before its ack.
            new = accepted.created_dialog
            await announce(self, CHANNEL, session_changed(new, active=True))
            if accepted.replaced_dialog is not None:
                await self.send_frame(idle_reset_notice(new, accepted.replaced_dialog))
            await self.send_frame(welcome(new))
        await self.send_frame(
            {
                "type": "ack",
                "client_msg_id": client_msg_id,
                "session_id": accepted.session_id,
                "message_id": accepted.inbox_id,
                "queued": accepted.queued,
            }
        )
        # A repeated client_msg_id names an old message: its turn may have ended long ago, and a
        # reconnecting client reloads the history anyway.
        if not accepted.duplicate and self.ledger.expect_message(accepted.inbox_id, time.monotonic()):
            self.reconciler.kick()
        try:
            await wake_dialog(accepted.session_id)
        except Exception:  # acked and durable: the workers' inbox scan finds it anyway
            log.warning(
                "could not wake a worker for %s; the inbox scan will start it",
                accepted.session_id,
                exc_info=True,
            )

    async def on_history(self, frame: dict) -> None:
        session_id = optional_str(frame, "session_id", 255)
        if session_id is None:
            raise FrameError("invalid_frame", "history needs a session_id")
        before_seq = optional_int(frame, "before_seq", 1, MAX_SEQ)
        limit = optional_int(frame, "limit", 1, MAX_HISTORY_LIMIT) or 50
        try:
            page = await run_storage(storage.history_page, self.user, session_id, before_seq, limit)
        except DatabaseError:
            # Seed 004 §8: a failed read of a dialog live in this process is served from memory.
            # A cli_chat dialog id names its chat, so ownership needs no DB read.
            page = None
            if session_id.startswith(f"{CHANNEL}:{self.chat_id}:"):
                page = session_manager().history_page_from_memory(session_id, before_seq, limit)
            if page is None:
                raise
            log.warning("history of %s served from memory: the database read failed", session_id)
        await self.send_frame({"type": "session_history", **page})

    async def on_sessions(self, frame: dict) -> None:
        paging = sessions_request(frame)
        page = await run_storage(sessions_page, self.user, CHANNEL, self.chat_id, **paging)
        await self.send_frame({"type": "sessions", **page})

    async def on_stop(self, frame: dict) -> None:
        session_id = optional_str(frame, "session_id", 255)
        if session_id is None:
            raise FrameError("invalid_frame", "stop needs a session_id")
        turn_id = optional_str(frame, "turn_id", 64)
        await self.stop_turn(session_id, turn_id)

    async def stop_turn(self, session_id: str, turn_id: str | None = None, *, typed: bool = False) -> None:
        """Ask the workers to cancel the dialog's running turn (``StopRequests.stop``)."""
        await self.stops.stop(session_id, turn_id, typed=typed)

    async def stop_ack(self, message: dict) -> None:
        """A worker cancelled the turn we asked it to stop (its terminal snapshot follows)."""
        self.stops.acknowledged(str(message.get("turn_id")))

    async def on_seen(self, frame: dict) -> None:
        turn_id = optional_str(frame, "turn_id", 64)
        revision = optional_int(frame, "revision", 0)
        if turn_id is None or revision is None:
            raise FrameError("invalid_frame", "seen needs turn_id and revision")
        for payload in self.window.seen(turn_id, revision):
            await self.send(text_data=turn_updated_frame(payload))

    async def on_ping(self, frame: dict) -> None:
        await self.send_frame({"type": "pong", "nonce": frame.get("nonce")})

    # --- server → client (channel layer handlers) ---------------------------------------------
    async def turn_snapshot(self, message: dict) -> None:
        """A turn snapshot from a sink or a replay: through the credit window, then out."""
        turn_id = message["turn_id"]
        if message.get("terminal"):
            await self._offer_terminal(turn_id, message["revision"], message["json"])
            return
        for payload in self.window.offer(turn_id, message["revision"], False, message["json"]):
            await self.send(text_data=turn_updated_frame(payload))
        if self.ledger.saw_running(turn_id, time.monotonic(), message.get("inbox_id")):
            self.reconciler.kick()

    async def _offer_terminal(self, turn_id: str, revision: int, payload: str) -> None:
        """A terminal snapshot, live or rebuilt: out once per turn (the window drops copies)."""
        for text in self.window.offer(turn_id, revision, True, payload):
            await self.send(text_data=turn_updated_frame(text))
        self.ledger.sent_terminal(turn_id)

    async def _send_text(self, text: str) -> None:
        await self.send(text_data=text)

    async def server_shutdown(self, message: dict) -> None:
        """The server is stopping: close the socket cleanly so clients reconnect elsewhere/later."""
        await self.close(code=CLOSE_SERVER_SHUTDOWN, reason="server shutting down")

    async def chat_frame(self, message: dict) -> None:
        """A pre-serialised frame for every connection of the chat (except the one it skips).

        A turn's ``turn_committed`` goes out once per connection (a rebuilt copy may have gone
        first); a turn's plain fallback never after its final (``TurnReconciler.resolve_fallback``);
        a kept notice is marked received once sent (``ready_notices``).
        """
        if message.get("skip") == self.channel_name:
            return
        committed_turn = message.get("committed_turn_id")
        fallback_for = message.get("fallback_for")
        if committed_turn:
            if self.ledger.committed_sent(committed_turn):
                return
            await self.send(text_data=message["json"])
            self.ledger.sent_committed(committed_turn, message.get("committed_inbox_id"))
        elif fallback_for:
            if not self.ledger.terminal_sent(fallback_for):
                resolving = asyncio.ensure_future(
                    self.reconciler.resolve_fallback(fallback_for, message["json"])
                )
                self.watchdogs.add(resolving)
                resolving.add_done_callback(self.watchdogs.discard)
        else:
            kept = message.get("kept_notice")
            if kept and not self.kept_notices_sent.first_time(kept):
                return
            await self.send(text_data=message["json"])
            if kept:
                marking = asyncio.ensure_future(mark_received(kept))
                self.watchdogs.add(marking)
                marking.add_done_callback(self.watchdogs.discard)

    # --- helpers ------------------------------------------------------------------------------
    async def send(
        self, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False
    ) -> None:
        """Every frame goes out here: one over :data:`MAX_OUTGOING_FRAME_BYTES` has its longest
        strings cut to fit (a history page of huge rows, a snapshot of an endless answer), so a
        frame never closes the connection of every client of the chat (Daphne refuses to send it)."""
        if text_data is not None and len(text_data) > _FIT_CHECK_CHARS:
            try:
                text_data = fit_frame(text_data, MAX_OUTGOING_FRAME_BYTES)
            except ValueError:  # not expected for any frame we build: say so rather than go silent
                ref = secrets.token_hex(4)
                log.error(
                    "a %d-character frame could not be cut to fit; not sent (ref %s)", len(text_data), ref
                )
                text_data = dumps(
                    {
                        "type": "error",
                        "code": "frame_too_large",
                        "ref": ref,
                        "message": "an answer was too large to send over the WebSocket; "
                        "read it through the REST history",
                    }
                )
        await super().send(text_data=text_data, bytes_data=bytes_data, close=close)

    async def send_frame(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=dumps(frame))

    async def send_error(
        self, code: str, message: str, *, ref: str | None = None, client_msg_id: str | None = None
    ) -> None:
        frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
        if ref:
            frame["ref"] = ref
        if client_msg_id:
            frame["client_msg_id"] = client_msg_id
        await self.send_frame(frame)


def budget_error_frame(exc: storage.BudgetExceededError, client_msg_id: str | None) -> dict[str, Any]:
    """The ``error`` frame ``budget_exceeded`` (issue 17): the budget's words, and ``retry_after``
    (whole seconds) until it resets at UTC midnight."""
    retry_after = max(1, int((exc.refusal.resets_at.timestamp() - time.time()) + 0.999))
    frame: dict[str, Any] = {"type": "error", "code": "budget_exceeded", "message": str(exc)}
    frame["retry_after"] = retry_after
    if client_msg_id:
        frame["client_msg_id"] = client_msg_id
    return frame


class UnknownPathConsumer(LoopDispatch, AsyncWebsocketConsumer):
    """Any other WebSocket path: refused at the handshake (HTTP 403), never a server error."""

    async def connect(self) -> None:
        await self.close()
