"""Slash commands typed in Feishu: the same commands as the WebUI's (seed 004 §7), answered as text.

:class:`FeishuCommandClient` is the ``CommandClient`` of ``conversations.chat.commands`` for one
command message: every answer frame is rendered with ``command_text.render_text`` and sent as a
plain message replying to the command, through the ordered outbound dispatcher; each answer's
idempotency key is derived from the command's message id and its place among the answers, so a
command handled again (after a crash before it was marked answered) repeats no message within the
platform's uuid hour. ``/stop`` asks the workers like a WebSocket client does (``chat.stops``).
"""

from __future__ import annotations

import asyncio
import logging

from conversations.chat.command_text import render_text
from conversations.chat.commands import handle_command
from conversations.chat.stops import StopRequests
from delivery.outbound import OutboundDispatcher, OutboundMessage

__all__ = ["FeishuCommandClient", "run_command"]

log = logging.getLogger(__name__)

CHANNEL = "feishu"


class FeishuCommandClient:
    """One Feishu command's answers (``conversations.chat.commands.CommandClient``).

    Args:
        chat_id: The Feishu chat (``oc_…``).
        message_id: The command message (``om_…``): answers reply to it.
        dispatcher: Where the answers go (``channel="feishu"`` lane of the chat).
    """

    user = None  # Feishu dialogs have no Django owner (DESIGN §3)
    channel_name = ""  # no layer channel: ``announce`` has nobody to skip

    def __init__(self, chat_id: str, message_id: str, dispatcher: OutboundDispatcher) -> None:
        self.chat_id = chat_id
        self.message_id = message_id
        self.dispatcher = dispatcher
        self.answers = 0
        self.tasks: set[asyncio.Task] = set()
        self.stops = StopRequests(None, CHANNEL, chat_id, "", self.send_frame, self.tasks)

    async def send_frame(self, frame: dict) -> None:
        """Renders ``frame`` as text and sends it (frames without text are skipped)."""
        text = render_text(frame)
        if not text:
            return
        self.answers += 1
        level = "error" if frame.get("type") == "error" else str(frame.get("level") or "info")
        result = await self.dispatcher.deliver(
            OutboundMessage(
                CHANNEL,
                self.chat_id,
                text,
                level=level,
                session_id=frame.get("session_id"),
                id=f"{self.message_id}:a{self.answers}",
                reply_to=self.message_id,
            )
        )
        if result.ok is not True:
            log.warning("feishu command answer in %s not sent: %s", self.chat_id, result.error)

    async def send_error(
        self, code: str, message: str, *, ref: str | None = None, client_msg_id: str | None = None
    ) -> None:
        await self.send_frame({"type": "error", "code": code, "message": message})

    async def stop_turn(self, session_id: str, turn_id: str | None = None, *, typed: bool = False) -> None:
        await self.stops.stop(session_id, turn_id, typed=typed)

    async def wait(self, timeout: float = 5.0) -> None:
        """Waits (bounded) for the ``/stop`` watchdogs this command started."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=timeout)


async def run_command(chat_id: str, message_id: str, text: str, dispatcher: OutboundDispatcher) -> None:
    """Answers one command typed in Feishu; errors are answered, never raised (a dialog that is
    not this chat's answers ``not_found``)."""
    from conversations import storage

    client = FeishuCommandClient(chat_id, message_id, dispatcher)
    try:
        await handle_command(client, CHANNEL, text, None)
    except storage.NotFoundError:
        await client.send_error("not_found", "no such dialog in this chat (see /sessions)")
    await client.wait()
