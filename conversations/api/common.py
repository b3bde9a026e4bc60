"""What every endpoint module of the REST API shares: its chat, documented errors, the id path
parameter, and publishing to the chat's WebSocket clients."""

from __future__ import annotations

import logging

from ninja import Path

from conversations.api import queries
from conversations.api.schemas import ErrorOut
from conversations.runtime import notify

log = logging.getLogger(__name__)

CHANNEL = "cli_chat"
"""The API's own chat is the caller's cli_chat chat (``cli_chat:<user pk>``)."""

SessionId = Path(..., min_length=1, description="the unified id `{channel}:{chat_id}:{dialog_id}`")


def errors(*statuses: int) -> dict[int, type[ErrorOut]]:
    """Documented error answers: those of every authenticated operation plus ``statuses``
    (400: a body that is not JSON, or a NUL character in the URL — ``NulRefusingMiddleware``)."""
    return {status: ErrorOut for status in (400, 401, 413, 422, 503, *statuses)}


async def publish(channel: str, chat_id: str, *frames: dict) -> None:
    """Tell the chat's WebSocket clients (best effort: what they miss they re-read on reconnect)."""
    for frame in frames:
        try:
            await notify.publish_frame(channel, chat_id, frame)
        except Exception:
            log.warning(
                "could not publish %s to the chat %s:%s", frame.get("type"), channel, chat_id, exc_info=True
            )


def checked(session_id: str) -> str:
    """``session_id``, once it could name a dialog (``storage.NotFoundError`` otherwise: a 404)."""
    queries.check_ref(session_id)
    return session_id
