"""A chat connection's stop requests: ask the workers, and answer the stop no worker acknowledges.

Only the turn running when the stop is asked is cancelled; a repeated stop never cancels the
next queued turn (``storage.claims``). The owning worker acknowledges with ``stop.ack``; its
terminal ``cancelled`` snapshot is the real answer. Without an acknowledgement within
``STOP_ACK_SECONDS`` the turn's process died: the user is told it will be reported interrupted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from conversations import storage
from conversations.runtime.agent_channel import request_stop
from conversations.storage.runner import run_storage

log = logging.getLogger(__name__)

STOP_ACK_SECONDS = 2.0
"""Seconds a stop request waits for the owning worker's acknowledgement before telling the user
that no live worker runs the turn."""


class StopRequests:
    """The stop requests of one connection of a chat.

    Args:
        user: The connection's user (a foreign dialog raises ``storage.NotFoundError``).
        channel: The chat's platform.
        chat_id: The chat.
        reply_channel: The connection's channel: where workers send ``stop.ack``.
        send_frame: Sends a frame to the connection.
        tasks: The connection's background tasks (cancelled when it closes); the watchdogs join it.
    """

    def __init__(
        self,
        user: Any,
        channel: str,
        chat_id: str,
        reply_channel: str,
        send_frame: Callable[[dict[str, Any]], Awaitable[None]],
        tasks: set[asyncio.Task],
    ) -> None:
        self.user = user
        self.channel = channel
        self.chat_id = chat_id
        self.reply_channel = reply_channel
        self.send_frame = send_frame
        self.tasks = tasks
        self.acks: dict[str, tuple[asyncio.Event, int]] = {}  # turn id → (acked, watchdogs waiting)

    async def stop(self, session_id: str, turn_id: str | None = None, *, typed: bool = False) -> None:
        """Ask the workers to cancel the dialog's running turn (its terminal snapshot answers).

        Only the turn running now (or ``turn_id``, when the client names the turn it sees) is
        cancelled: a repeated ``stop`` frame never cancels the next queued turn. A ``/stop`` the
        user ``typed`` is no double click: it stops whatever runs now. Raises
        storage.NotFoundError for a foreign dialog; a notification when nothing (or another turn)
        runs.
        """
        await run_storage(storage.dialog_for_user, self.user, session_id)
        running = await run_storage(storage.running_inbox, self.channel, self.chat_id)
        current = next((item for item in running if item["session_id"] == session_id), None)
        if turn_id is None and current is not None and not typed:
            # The same stop again (a double click, a retry on another server) after its turn
            # ended: never applied to the next turn (storage.claims).
            repeated = await run_storage(storage.repeated_stop, session_id, current["turn_id"])
            if repeated is not None:
                await self.send_frame(
                    {
                        "type": "notification",
                        "level": "info",
                        "session_id": session_id,
                        "turn_id": repeated,
                        "content": "That turn was already stopped.",
                    }
                )
                return
        if current is None or (turn_id is not None and current["turn_id"] != turn_id):
            content = "Nothing is running." if current is None else "That turn is not running any more."
            await self.send_frame(
                {"type": "notification", "level": "info", "content": content, "session_id": session_id}
            )
            return
        turn_id = current["turn_id"]
        await run_storage(storage.note_stop_requested, session_id, turn_id)
        acked, waiting = self.acks.get(turn_id) or (asyncio.Event(), 0)
        self.acks[turn_id] = (acked, waiting + 1)
        await request_stop(session_id, turn_id=turn_id, reply_channel=self.reply_channel)
        watchdog = asyncio.ensure_future(self._watchdog(session_id, turn_id, acked))
        self.tasks.add(watchdog)
        watchdog.add_done_callback(self.tasks.discard)

    def acknowledged(self, turn_id: str) -> None:
        """A worker cancelled the turn we asked it to stop (its terminal snapshot follows)."""
        entry = self.acks.get(turn_id)
        if entry is not None:
            entry[0].set()

    async def _watchdog(self, session_id: str, turn_id: str, acked: asyncio.Event) -> None:
        """No worker acknowledged the stop: the turn's process died and no one took it over yet.

        Its dialog is taken over when the dead owner's lease expires, and the turn is then reported
        interrupted; say so now rather than leave ``/stop`` unanswered — only while that very turn
        still reads started (one that just ended was answered by its terminal snapshot).
        """
        try:
            await asyncio.wait_for(acked.wait(), STOP_ACK_SECONDS)
            return
        except TimeoutError:
            pass
        finally:
            event, waiting = self.acks.get(turn_id, (None, 0))
            if event is acked:
                if waiting <= 1:
                    del self.acks[turn_id]
                else:
                    self.acks[turn_id] = (acked, waiting - 1)
        try:
            running = await run_storage(storage.running_inbox, self.channel, self.chat_id)
            if any(item["turn_id"] == turn_id for item in running):
                lease = settings.PICOBOT.lease_seconds + settings.PICOBOT.inbox_scan_seconds
                await self.send_frame(
                    {
                        "type": "notification",
                        "level": "warning",
                        "session_id": session_id,
                        "turn_id": turn_id,
                        "content": "No server is running that turn any more (it was cut off, probably by a "
                        f"restart); it will be reported as interrupted within about {lease:.0f} s.",
                    }
                )
        except Exception:
            log.exception("stop watchdog of %s failed", session_id)
