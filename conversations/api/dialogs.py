"""The dialogs of the caller: list, create, activate, compact, read, rename, delete (PROTOCOL §2).

A dialog created, renamed, activated or deleted here is announced to the WebSocket clients of its
chat with ``session_changed``, as the slash commands do. Two routers: ``item_router`` holds
``/dialogs/{session_id}`` itself (and ``…/compact``, declared before it) and is mounted after the
other ``/dialogs/{session_id}/…`` routes, which the id's ``path`` converter would otherwise
swallow (``routes``).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Status

from conversations import storage
from conversations.api import queries
from conversations.api.common import CHANNEL, SessionId, checked, errors, publish
from conversations.api.errors import ApiError
from conversations.api.schemas import (
    MAX_DIALOG_PAGE,
    CompactOut,
    DialogCreate,
    DialogOut,
    DialogPage,
    DialogUpdate,
    ModelsOut,
)
from conversations.chat.commands import start_compaction, welcome
from conversations.runtime.agent_channel import request_stop
from conversations.runtime.model_choice import ModelChoiceError, choose_model, models_listing, with_preset
from conversations.runtime.notify import session_changed
from conversations.runtime.provider import get_provider
from conversations.runtime.sessions import session_manager
from conversations.runtime.supervisor import SupervisorClosedError
from conversations.storage.runner import run_storage
from conversations.usage.writer import usage_writer

log = logging.getLogger(__name__)

MAX_OFFSET = 1_000_000_000

router = Router()
item_router = Router()


@router.get("/dialogs", response={200: DialogPage, **errors()}, tags=["dialogs"])
async def list_dialogs(
    request: HttpRequest,
    limit: int = Query(50, ge=1, le=MAX_DIALOG_PAGE, description="page size"),
    offset: int = Query(0, ge=0, le=MAX_OFFSET, description="dialogs to skip"),
    channel: str = Query(
        None, max_length=32, description="only this channel's dialogs (`cli_chat`, `feishu`)"
    ),
    chat_id: str = Query(None, max_length=128, description="only this chat's dialogs"),
) -> dict:
    """The caller's dialogs (every channel), most recently active first.

    ``{items: [Dialog…], total, limit, offset}``; each item as ``GET /api/dialogs/{session_id}``.
    """
    page = await run_storage(queries.list_dialogs, request.auth, channel, chat_id, limit, offset)
    return {**page, "items": [with_preset(item) for item in page["items"]]}


@router.post("/dialogs", response={201: DialogOut, **errors(400, 403)}, tags=["dialogs"])
async def create_dialog(
    request: HttpRequest, response: HttpResponse, payload: DialogCreate | None = None
) -> Status:
    """Create a dialog in the caller's cli_chat chat and make it the active one (as ``/new``).

    Body ``{title?}`` (or none). 201 with the dialog and its ``Location``. The chat's WebSocket
    clients get ``session_changed`` (``active: true``) and the welcome ``notification``.
    """
    user, chat_id = request.auth, str(request.auth.pk)
    title = payload.title if payload is not None else None
    if title is not None and not title.strip():  # as PATCH: a title given must say something
        raise ApiError(422, "invalid_title", "a title cannot be empty; leave it out for the default")
    try:
        dialog = await run_storage(storage.create_dialog, user, CHANNEL, chat_id, title)
    except ValueError as exc:
        raise ApiError(422, "invalid_title", str(exc)) from None
    info = with_preset(await run_storage(storage.dialog_info, user, dialog.id))
    await publish(CHANNEL, chat_id, session_changed(dialog, active=True), welcome(dialog))
    response["Location"] = f"/api/dialogs/{quote(dialog.id, safe=':')}"
    return Status(201, info)


@router.post(
    "/dialogs/{path:session_id}/activate", response={200: DialogOut, **errors(403, 404)}, tags=["dialogs"]
)
async def activate_dialog(request: HttpRequest, session_id: str = SessionId) -> dict:
    """Make the dialog its chat's active dialog (as ``/switch``); 200 with the dialog.

    The chat's WebSocket clients get ``session_changed`` (``active: true``).
    """
    dialog, info = await run_storage(queries.activate_owned, request.auth, checked(session_id))
    await publish(dialog.channel, dialog.chat_id, session_changed(dialog, active=True))
    return with_preset(info)


@router.get("/models", response={200: ModelsOut, **errors()}, tags=["models"])
async def list_models(request: HttpRequest) -> dict:
    """The model presets a dialog can use (``PATCH /api/dialogs/{session_id}`` ``{"model"}``,
    ``/model``), without keys: ``{default, items}``; ``available`` is false for a preset whose key
    variable is not set."""
    return models_listing()


@item_router.post(
    "/dialogs/{path:session_id}/compact",
    response={202: CompactOut, **errors(403, 404, 409)},
    tags=["dialogs"],
)
async def compact(request: HttpRequest, session_id: str = SessionId) -> Status:
    """Compact the dialog now (as ``/compact``): started in the background, 202 at once.

    The summary call may take up to ``PICOBOT_COMPACT_TIMEOUT`` seconds, so it runs as a task of
    the process's control supervisor (bounded, reaped at shutdown); the outcome reaches the chat's
    WebSocket clients as a ``notification``, and shows in ``GET …/{session_id}``'s
    ``compacted_through_seq``. 409 ``compaction_unavailable`` without a model that can summarise
    (the offline replay provider), 409 ``compaction_running`` while one of this dialog already runs
    on any server process (one summary call, however often it is asked); 503 while the server shuts down.
    """
    dialog = await run_storage(storage.dialog_for_user, request.auth, checked(session_id))
    try:
        offline = get_provider().offline
    except ValueError:
        offline = True  # a misconfigured provider cannot summarise either
    if offline:
        raise ApiError(
            409,
            "compaction_unavailable",
            "compaction needs a configured model; the offline replay provider cannot summarise",
        )
    try:
        started = await start_compaction(dialog.channel, dialog.chat_id, dialog.id)
    except SupervisorClosedError:
        raise ApiError(503, "unavailable", "the server is shutting down; try again in a moment") from None
    if not started:
        raise ApiError(
            409,
            "compaction_running",
            "a compaction of this dialog is already running; the chat is notified when it is done",
        )
    return Status(
        202,
        {
            "session_id": dialog.id,
            "status": "started",
            "message": "compaction started; the chat is notified when it is done",
        },
    )


@item_router.get("/dialogs/{path:session_id}", response={200: DialogOut, **errors(404)}, tags=["dialogs"])
async def get_dialog(request: HttpRequest, session_id: str = SessionId) -> dict:
    """One dialog: title, ids, counts, created/last active (ms), model, usage,
    ``history_revision``, ``queued``, ``running``, ``active`` (= ``/info``'s ``info``)."""
    await usage_writer.flush()  # this process's calls so far count (issue 17)
    return with_preset(await run_storage(storage.dialog_info, request.auth, checked(session_id)))


@item_router.patch(
    "/dialogs/{path:session_id}", response={200: DialogOut, **errors(400, 403, 404)}, tags=["dialogs"]
)
async def update_dialog(request: HttpRequest, payload: DialogUpdate, session_id: str = SessionId) -> dict:
    """Rename (``title``: a user rename, never overwritten by a generated title, as ``/rename``)
    and/or choose the model preset (``model``, as ``/model NAME``; ``""`` or null: the default).

    200 with the dialog; 422 ``invalid_title``, or ``invalid_model`` for an unknown preset or one
    whose key the server lacks (nothing is changed then). A rename is announced to the chat's
    WebSocket clients with ``session_changed``.
    """
    checked(session_id)
    model = None
    if "model" in payload.model_fields_set:
        try:
            model = choose_model(payload.model)
        except ModelChoiceError as exc:
            raise ApiError(422, "invalid_model", str(exc)) from None
    dialog = None
    if payload.title is not None:
        try:
            dialog = await run_storage(storage.rename_dialog, request.auth, session_id, payload.title)
        except ValueError as exc:
            raise ApiError(422, "invalid_title", str(exc)) from None
    if model is not None:
        await run_storage(storage.set_dialog_model, request.auth, session_id, model)
    info = with_preset(await run_storage(storage.dialog_info, request.auth, session_id))
    if dialog is not None:
        await publish(dialog.channel, dialog.chat_id, session_changed(dialog, active=info["active"]))
    return info


@item_router.delete("/dialogs/{path:session_id}", response={204: None, **errors(403, 404)}, tags=["dialogs"])
async def delete_dialog(request: HttpRequest, session_id: str = SessionId) -> Status:
    """Delete (soft: it disappears at once; ``purge`` removes it later), as ``/delete``. 204.

    A running turn is cancelled and queued messages are dropped. The chat's WebSocket clients get
    ``session_changed`` (``deleted: true``) and, when it was the active dialog, ``session_changed``
    for the dialog that became active (a new one, with its welcome, when none was left).
    """
    result = await run_storage(queries.delete_owned, request.auth, checked(session_id))
    deleted = result.deleted
    session_manager().evict(deleted.id)  # this process's runtime session (others expire by TTL)
    if result.running_turn:
        try:
            await request_stop(deleted.id)
        except Exception:
            log.warning("could not ask the workers to stop %s's turn", deleted.id, exc_info=True)
    frames: list[dict[str, Any]] = [session_changed(deleted, active=False, deleted=True)]
    if result.active_changed:
        frames.append(session_changed(result.active, active=True))
    if result.active_created:
        frames.append(welcome(result.active))
    if result.dropped_queued:
        frames.append(
            {
                "type": "notification",
                "level": "info",
                "session_id": deleted.id,
                "content": f"{result.dropped_queued} queued message(s) of the deleted dialog will not run.",
            }
        )
    await publish(deleted.channel, deleted.chat_id, *frames)
    return Status(204, None)
