"""A dialog's messages: its history, and sending a user message (PROTOCOL §2).

A message sent here is accepted into the same durable inbox as a WebSocket ``message`` and runs
the same turn, whose snapshots every WebSocket client of the chat receives (PROTOCOL §1).
"""

from __future__ import annotations

import logging

from django.http import HttpRequest
from ninja import Query, Router, Status

from conversations import storage
from conversations.agent.inbound import InboundMessage, is_blank
from conversations.api import queries
from conversations.api.common import CHANNEL, SessionId, checked, errors
from conversations.api.errors import ApiError
from conversations.api.schemas import MAX_HISTORY_LIMIT, MAX_SEQ, HistoryPage, MessageAccepted, MessageIn
from conversations.auth import throttle
from conversations.models import now_ms
from conversations.runtime.agent_channel import wake_dialog
from conversations.storage.runner import run_storage

log = logging.getLogger(__name__)

# A slash command is not a message (PROTOCOL §1): over REST each has its endpoint instead.
SLASH_COMMAND_HINT = (
    "slash commands are not messages; use the endpoints instead: /new → POST /api/dialogs, "
    "/sessions → GET /api/dialogs, /switch → POST /api/dialogs/{session_id}/activate, "
    "/rename → PATCH /api/dialogs/{session_id}, /delete → DELETE /api/dialogs/{session_id}, "
    "/info → GET /api/dialogs/{session_id}, /stop → POST /api/dialogs/{session_id}/stop, "
    "/compact → POST /api/dialogs/{session_id}/compact, /model → PATCH /api/dialogs/{session_id}, "
    "/schedule → /api/dialogs/{session_id}/schedules and /api/schedules/{id}, /tasks → GET /api/tasks, "
    "/stop task → POST /api/tasks/{id}/stop"
)

router = Router()


@router.get(
    "/dialogs/{path:session_id}/messages", response={200: HistoryPage, **errors(404)}, tags=["messages"]
)
async def history(
    request: HttpRequest,
    session_id: str = SessionId,
    before_seq: int = Query(None, ge=1, le=MAX_SEQ, description="only messages below this `seq`"),
    limit: int = Query(50, ge=1, le=MAX_HISTORY_LIMIT, description="at most this many (the newest of them)"),
) -> dict:
    """A page of history, oldest first: ``{session_id, history_revision, messages, has_more}``
    (the WebSocket's ``session_history``; messages as PROTOCOL §1 "History message")."""
    return await run_storage(storage.history_page, request.auth, checked(session_id), before_seq, limit)


@router.post(
    "/dialogs/{path:session_id}/messages",
    response={202: MessageAccepted, **errors(400, 403, 404, 409, 429)},
    tags=["messages"],
)
async def send_message(request: HttpRequest, payload: MessageIn, session_id: str = SessionId) -> Status:
    """Send a user message: the same operation as a WebSocket ``message`` (PROTOCOL §1).

    Body ``{content, client_msg_id?}``. 202 ``{message_id, session_id, queued, duplicate}`` once
    it is durably in the dialog's inbox (the WebSocket ``ack``); its turn then runs like any other
    and every WebSocket client of the chat sees it (``turn_updated``, ``turn_committed``). A
    ``client_msg_id`` already used answers the same ``message_id`` again (``duplicate: true``),
    or 409 ``client_msg_id_in_use`` when it names a message of another dialog (also a deleted
    one; 404 only when this dialog itself was deleted). 422 for blank
    content and for a slash command (each has its endpoint); 429 ``inbox_full`` when the dialog
    already has its maximum of queued messages; 429 ``rate_limited`` (with ``Retry-After``) past
    ``PICOBOT_USER_MESSAGES_PER_MINUTE``, nothing stored.
    """
    received_at = now_ms()  # the user row's created_at (seed 000 §10.2)
    user, chat_id = request.auth, str(request.auth.pk)
    retry_after = throttle.take_message(user.pk)
    if retry_after is not None:  # issue 16: refused, not stored; the client may send it again
        raise ApiError(
            429,
            "rate_limited",
            throttle.too_many_messages_message(retry_after),
            headers={"Retry-After": str(retry_after)},
        )
    checked(session_id)
    content, client_msg_id = payload.content, payload.client_msg_id
    if is_blank(content):
        raise ApiError(422, "invalid_content", "content must not be blank")
    if content.lstrip().startswith("/"):
        raise ApiError(422, "slash_command", SLASH_COMMAND_HINT)
    if client_msg_id is not None and (not client_msg_id.isprintable() or is_blank(client_msg_id)):
        raise ApiError(422, "invalid_client_msg_id", "client_msg_id must be printable, non-blank text")
    await run_storage(storage.dialog_for_user, user, session_id)  # foreign/unknown: 404, inbox untouched
    inbound = InboundMessage(
        channel=CHANNEL,
        chat_id=chat_id,
        sender_id=chat_id,
        content=content,
        received_at=received_at,
        session_id=session_id,
        client_msg_id=client_msg_id,
    )
    try:
        accepted = await run_storage(storage.accept_inbound, user, inbound)
    except storage.NotFoundError:
        # The target was checked just above: either it was deleted meanwhile (404), or the
        # client_msg_id names a message of a dialog that was deleted — another dialog than this
        # live one, so the id is taken (409), not this dialog missing.
        if client_msg_id is not None:
            used_in = await run_storage(queries.client_msg_dialog, user, client_msg_id)
            if used_in is not None and used_in != session_id:
                raise ApiError(
                    409,
                    "client_msg_id_in_use",
                    "this client_msg_id already names a message of another dialog; use a new one",
                ) from None
        raise
    if accepted.duplicate and accepted.session_id != session_id:
        raise ApiError(
            409,
            "client_msg_id_in_use",
            "this client_msg_id already names a message of another dialog; use a new one",
        )
    try:
        await wake_dialog(accepted.session_id)
    except Exception:  # the inbox scan finds it anyway (DESIGN §2: a lost wake-up is harmless)
        log.warning(
            "could not wake the worker for %s; the inbox scan will", accepted.session_id, exc_info=True
        )
    return Status(
        202,
        {
            "message_id": accepted.inbox_id,
            "session_id": accepted.session_id,
            "queued": accepted.queued,
            "duplicate": accepted.duplicate,
        },
    )
