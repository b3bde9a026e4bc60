"""The REST control API's endpoints (PROTOCOL §2), mounted at ``/api/``.

Every view is ``async``: storage calls go through ``run_storage`` (the agent's storage threads,
short calls, bounded retry), channel-layer calls are awaited on the server's loop — nothing here
holds the one thread Django shares between sync views and the async ORM under ASGI (DESIGN §2),
and waits for a worker (``…/turn``, ``…/stop``) cost no thread at all.

The API's own chat is the caller's cli_chat chat (``cli_chat:<user pk>``), the very chat the
WebUI, the TUI and every WebSocket of that user share: a dialog created, renamed, activated or
deleted here is announced to them with ``session_changed`` (as the slash commands do), and a
message sent here is accepted into the same durable inbox as a WebSocket ``message`` and runs the
same turn, whose snapshots every WebSocket client of the chat receives (PROTOCOL §1).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI, Path, Query, Status

from conversations import storage
from conversations.agent.inbound import InboundMessage, is_blank
from conversations.api import live, queries
from conversations.api.auth import api_auth
from conversations.api.errors import ApiError, install_error_handlers, limit_body
from conversations.api.schemas import (
    MAX_DIALOG_PAGE,
    MAX_HISTORY_LIMIT,
    MAX_SEQ,
    CompactOut,
    DialogCreate,
    DialogOut,
    DialogPage,
    DialogRename,
    ErrorOut,
    HealthOut,
    HistoryPage,
    MessageAccepted,
    MessageIn,
    ReadyOut,
    StopOut,
    TurnOut,
)
from conversations.chat.commands import start_compaction, welcome
from conversations.chat.consumer import STOP_ACK_SECONDS
from conversations.models import now_ms
from conversations.runtime import notify
from conversations.runtime.notify import session_changed
from conversations.runtime.provider import get_provider
from conversations.runtime.sessions import session_manager
from conversations.runtime.supervisor import SupervisorClosedError
from conversations.runtime.worker import request_stop, wake_dialog
from conversations.storage.runner import run_storage

log = logging.getLogger("conversations.api")

CHANNEL = "cli_chat"
MAX_OFFSET = 1_000_000_000
DB_PING_SECONDS = 3.0
# A slash command is not a message (PROTOCOL §1): over REST each has its endpoint instead.
SLASH_COMMAND_HINT = (
    "slash commands are not messages; use the endpoints instead: /new → POST /api/dialogs, "
    "/sessions → GET /api/dialogs, /switch → POST /api/dialogs/{session_id}/activate, "
    "/rename → PATCH /api/dialogs/{session_id}, /delete → DELETE /api/dialogs/{session_id}, "
    "/info → GET /api/dialogs/{session_id}, /stop → POST /api/dialogs/{session_id}/stop, "
    "/compact → POST /api/dialogs/{session_id}/compact"
)


class PicoBotAPI(NinjaAPI):
    """``NinjaAPI`` whose OpenAPI operation ids are the view names (``send_message``)."""

    def get_openapi_operation_id(self, operation: Any) -> str:
        return operation.view_func.__name__


api = PicoBotAPI(
    title="PicoBot control API",
    version="1",
    description=(
        "The REST control API of PROTOCOL.md §2. Authenticate with an API token "
        "(`Authorization: Bearer <token>`, from `manage.py createtoken`) or the WebUI's session "
        "(writes then need `X-CSRFToken`). Errors are `{code, message, ref}`; bodies over 1 MiB "
        "answer 413. `{session_id}` is a dialog's unified id `{channel}:{chat_id}:{dialog_id}` "
        "(URL-encoded or not)."
    ),
    urls_namespace="picobot_api",
    auth=api_auth(),
)
install_error_handlers(api)
api.add_decorator(limit_body, mode="view")


def _errors(*statuses: int) -> dict[int, type[ErrorOut]]:
    """Documented error answers: those of every authenticated operation plus ``statuses``
    (400: a body that is not JSON, or a NUL character in the URL — ``NulRefusingMiddleware``)."""
    return {status: ErrorOut for status in (400, 401, 413, 422, 503, *statuses)}


SessionId = Path(..., min_length=1, description="the unified id `{channel}:{chat_id}:{dialog_id}`")


async def _publish(channel: str, chat_id: str, *frames: dict) -> None:
    """Tell the chat's WebSocket clients (best effort: what they miss they re-read on reconnect)."""
    for frame in frames:
        try:
            await notify.publish_frame(channel, chat_id, frame)
        except Exception:
            log.warning("could not publish %s to the chat %s:%s", frame.get("type"), channel, chat_id, exc_info=True)


def _checked(session_id: str) -> str:
    queries.check_ref(session_id)
    return session_id


# --- service -------------------------------------------------------------------------------------


@api.get("/health", auth=None, response={200: HealthOut, 413: ErrorOut}, tags=["service"])
async def health(request: HttpRequest) -> dict:
    """Liveness: the process answers HTTP. No authentication, no dependency checked."""
    return {"status": "ok"}


@api.get("/ready", auth=None, response={200: ReadyOut, 413: ErrorOut, 503: ErrorOut}, tags=["service"])
async def ready(request: HttpRequest) -> dict:
    """Readiness: one database query (on the storage threads) and a channel-layer round trip.

    200 ``{status: "ready", checks: {database: "ok", channel_layer: "ok"}}``; 503 ``not_ready``
    with the same ``checks`` (``unreachable``) when either fails. No authentication (load
    balancers probe it); failures are detailed only in the log.
    """
    checks = {}
    try:
        await asyncio.wait_for(run_storage(queries.database_ping, retry=False), DB_PING_SECONDS)
        checks["database"] = "ok"
    except Exception:
        log.warning("readiness: the database did not answer", exc_info=True)
        checks["database"] = "unreachable"
    try:
        checks["channel_layer"] = "ok" if await live.layer_ping() else "unreachable"
    except Exception:
        log.warning("readiness: the channel layer did not answer", exc_info=True)
        checks["channel_layer"] = "unreachable"
    if any(state != "ok" for state in checks.values()):
        failing = ", ".join(name for name, state in checks.items() if state != "ok")
        raise ApiError(503, "not_ready", f"not ready: {failing} unreachable", extra={"checks": checks},
                       headers={"Retry-After": "5"})
    return {"status": "ready", "checks": checks}


# --- dialogs -------------------------------------------------------------------------------------


@api.get("/dialogs", response={200: DialogPage, **_errors()}, tags=["dialogs"])
async def list_dialogs(
    request: HttpRequest,
    limit: int = Query(50, ge=1, le=MAX_DIALOG_PAGE, description="page size"),
    offset: int = Query(0, ge=0, le=MAX_OFFSET, description="dialogs to skip"),
    channel: str = Query(None, max_length=32, description="only this channel's dialogs (`cli_chat`, `feishu`)"),
    chat_id: str = Query(None, max_length=128, description="only this chat's dialogs"),
) -> dict:
    """The caller's dialogs (every channel), most recently active first.

    ``{items: [Dialog…], total, limit, offset}``; each item as ``GET /api/dialogs/{session_id}``.
    """
    return await run_storage(queries.list_dialogs, request.auth, channel, chat_id, limit, offset)


@api.post("/dialogs", response={201: DialogOut, **_errors(400, 403)}, tags=["dialogs"])
async def create_dialog(request: HttpRequest, response: HttpResponse, payload: DialogCreate | None = None) -> Status:
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
    info = await run_storage(storage.dialog_info, user, dialog.id)
    await _publish(CHANNEL, chat_id, session_changed(dialog, active=True), welcome(dialog))
    response["Location"] = f"/api/dialogs/{quote(dialog.id, safe=':')}"
    return Status(201, info)


# Routes below ``/dialogs/{session_id}`` come before it: the id takes a ``path`` converter
# (it may arrive with encoded characters), which would otherwise swallow ``…/messages``.


@api.post("/dialogs/{path:session_id}/activate", response={200: DialogOut, **_errors(403, 404)}, tags=["dialogs"])
async def activate_dialog(request: HttpRequest, session_id: str = SessionId) -> dict:
    """Make the dialog its chat's active dialog (as ``/switch``); 200 with the dialog.

    The chat's WebSocket clients get ``session_changed`` (``active: true``).
    """
    dialog, info = await run_storage(queries.activate_owned, request.auth, _checked(session_id))
    await _publish(dialog.channel, dialog.chat_id, session_changed(dialog, active=True))
    return info


@api.get("/dialogs/{path:session_id}/messages", response={200: HistoryPage, **_errors(404)}, tags=["messages"])
async def history(
    request: HttpRequest,
    session_id: str = SessionId,
    before_seq: int = Query(None, ge=1, le=MAX_SEQ, description="only messages below this `seq`"),
    limit: int = Query(50, ge=1, le=MAX_HISTORY_LIMIT, description="at most this many (the newest of them)"),
) -> dict:
    """A page of history, oldest first: ``{session_id, history_revision, messages, has_more}``
    (the WebSocket's ``session_history``; messages as PROTOCOL §1 "History message")."""
    return await run_storage(storage.history_page, request.auth, _checked(session_id), before_seq, limit)


@api.post(
    "/dialogs/{path:session_id}/messages", response={202: MessageAccepted, **_errors(400, 403, 404, 409, 429)},
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
    already has its maximum of queued messages.
    """
    received_at = now_ms()  # the user row's created_at (seed 000 §10.2)
    user, chat_id = request.auth, str(request.auth.pk)
    _checked(session_id)
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
                raise ApiError(409, "client_msg_id_in_use",
                               "this client_msg_id already names a message of another dialog; use a new one") from None
        raise
    if accepted.duplicate and accepted.session_id != session_id:
        raise ApiError(409, "client_msg_id_in_use",
                       "this client_msg_id already names a message of another dialog; use a new one")
    try:
        await wake_dialog(accepted.session_id)
    except Exception:  # the inbox scan finds it anyway (DESIGN §2: a lost wake-up is harmless)
        log.warning("could not wake the worker for %s; the inbox scan will", accepted.session_id, exc_info=True)
    return Status(202, {
        "message_id": accepted.inbox_id,
        "session_id": accepted.session_id,
        "queued": accepted.queued,
        "duplicate": accepted.duplicate,
    })


@api.get("/dialogs/{path:session_id}/turn", response={200: TurnOut, **_errors(404)}, tags=["turns"])
async def running_turn(request: HttpRequest, session_id: str = SessionId) -> dict:
    """The running turn's latest snapshot (the WebSocket's ``turn_updated.turn``).

    Asked of the worker that runs it through the channel layer; when it does not answer within
    about a second (it died; the turn is reported interrupted once its dialog is taken over), a
    placeholder with ``revision: 0``, ``phase: "queued"``. 404 ``no_running_turn`` when none runs.
    """
    dialog, turn = await run_storage(queries.running_turn, request.auth, _checked(session_id))
    if turn is None:
        raise ApiError(404, "no_running_turn", "no turn of this dialog is running")
    return await live.turn_snapshot(turn, dialog.channel, dialog.chat_id)


@api.post("/dialogs/{path:session_id}/stop", response={202: StopOut, **_errors(403, 404, 409)}, tags=["turns"])
async def stop_turn(
    request: HttpRequest,
    session_id: str = SessionId,
    turn_id: str = Query(None, min_length=1, max_length=64,
                         description="stop only this turn (the one the client shows); 409 when it is not running"),
) -> Status:
    """Cancel the running turn now (as the WebSocket ``stop``; it does not queue behind it).

    Only the turn running when asked — or ``?turn_id=`` — is cancelled (its id is in the answer),
    never the next queued one: the same stop again within 3 s (``storage.STOP_REPEAT_MS``; from
    any client, on any server process sharing the database), after that turn ended and the next
    one started, gets the same answer and cancels nothing. 202 ``{session_id, turn_id, status: "stopping", acknowledged, message}``:
    ``acknowledged`` when the worker running it confirmed within 2 s (its terminal ``cancelled``
    snapshot reaches the WebSocket clients; asked again while it is being cancelled, the same
    answer); false when no live server runs it any more. 409 ``not_running`` when nothing (or not
    ``turn_id``) runs, or when that turn ended before it could be stopped.
    """
    dialog, turn = await run_storage(queries.running_turn, request.auth, _checked(session_id))
    running_id = turn["turn_id"] if turn is not None else None
    repeated = (
        await run_storage(storage.repeated_stop, dialog.id, running_id)
        if turn_id is None and running_id is not None else None
    )
    if repeated is not None:  # the same stop again, after its turn ended (storage.claims)
        return Status(202, {"session_id": dialog.id, "turn_id": repeated, "status": "stopping",
                            "acknowledged": True, "message": "the turn is being cancelled"})  # the first answer again
    if turn is None or (turn_id is not None and running_id != turn_id):
        raise ApiError(409, "not_running", "nothing is running in this dialog" if turn is None
                       else "that turn is not running (any more); nothing was stopped")
    await run_storage(storage.note_stop_requested, dialog.id, running_id)  # binds every server process
    acknowledged = await live.stop_turn(dialog.id, running_id, STOP_ACK_SECONDS)
    if acknowledged:
        message = "the turn is being cancelled"
    else:
        # No worker answered: the turn either ended meanwhile (nothing to stop) or its process died.
        _, still = await run_storage(queries.running_turn, request.auth, dialog.id)
        if still is None or still["turn_id"] != running_id:
            raise ApiError(409, "not_running", "that turn has already ended; nothing was stopped")
        lease = float(settings.PICOBOT["LEASE_SECONDS"]) + float(settings.PICOBOT["INBOX_SCAN_SECONDS"])
        message = ("no server is running that turn any more (it was cut off, probably by a restart); "
                   f"it will be reported as interrupted within about {lease:.0f} s")
    body = {"session_id": dialog.id, "turn_id": running_id, "status": "stopping", "acknowledged": acknowledged,
            "message": message}
    return Status(202, body)


@api.post("/dialogs/{path:session_id}/compact", response={202: CompactOut, **_errors(403, 404, 409)},
          tags=["dialogs"])
async def compact(request: HttpRequest, session_id: str = SessionId) -> Status:
    """Compact the dialog now (as ``/compact``): started in the background, 202 at once.

    The summary call may take up to ``PICOBOT_COMPACT_TIMEOUT`` seconds, so it runs as a task of
    the process's control supervisor (bounded, reaped at shutdown); the outcome reaches the chat's
    WebSocket clients as a ``notification``, and shows in ``GET …/{session_id}``'s
    ``compacted_through_seq``. 409 ``compaction_unavailable`` without a model that can summarise
    (the offline replay provider), 409 ``compaction_running`` while one of this dialog already runs
    on any server process (one summary call, however often it is asked); 503 while the server shuts down.
    """
    dialog = await run_storage(storage.dialog_for_user, request.auth, _checked(session_id))
    try:
        offline = get_provider().offline
    except ValueError:
        offline = True  # a misconfigured provider cannot summarise either
    if offline:
        raise ApiError(409, "compaction_unavailable",
                       "compaction needs a configured model; the offline replay provider cannot summarise")
    try:
        started = await start_compaction(dialog.channel, dialog.chat_id, dialog.id)
    except SupervisorClosedError:
        raise ApiError(503, "unavailable", "the server is shutting down; try again in a moment") from None
    if not started:
        raise ApiError(409, "compaction_running",
                       "a compaction of this dialog is already running; the chat is notified when it is done")
    return Status(202, {"session_id": dialog.id, "status": "started",
                        "message": "compaction started; the chat is notified when it is done"})


@api.get("/dialogs/{path:session_id}", response={200: DialogOut, **_errors(404)}, tags=["dialogs"])
async def get_dialog(request: HttpRequest, session_id: str = SessionId) -> dict:
    """One dialog: title, ids, counts, created/last active (ms), model, usage,
    ``history_revision``, ``queued``, ``running``, ``active`` (= ``/info``'s ``info``)."""
    return await run_storage(storage.dialog_info, request.auth, _checked(session_id))


@api.patch("/dialogs/{path:session_id}", response={200: DialogOut, **_errors(400, 403, 404)}, tags=["dialogs"])
async def rename_dialog(request: HttpRequest, payload: DialogRename, session_id: str = SessionId) -> dict:
    """Rename (body ``{title}``): a user rename, never overwritten by a generated title (as
    ``/rename``). 200 with the dialog; the chat's WebSocket clients get ``session_changed``."""
    _checked(session_id)
    try:
        dialog = await run_storage(storage.rename_dialog, request.auth, session_id, payload.title)
    except ValueError as exc:
        raise ApiError(422, "invalid_title", str(exc)) from None
    info = await run_storage(storage.dialog_info, request.auth, dialog.id)
    await _publish(dialog.channel, dialog.chat_id, session_changed(dialog, active=info["active"]))
    return info


@api.delete("/dialogs/{path:session_id}", response={204: None, **_errors(403, 404)}, tags=["dialogs"])
async def delete_dialog(request: HttpRequest, session_id: str = SessionId) -> Status:
    """Delete (soft: it disappears at once; ``purge`` removes it later), as ``/delete``. 204.

    A running turn is cancelled and queued messages are dropped. The chat's WebSocket clients get
    ``session_changed`` (``deleted: true``) and, when it was the active dialog, ``session_changed``
    for the dialog that became active (a new one, with its welcome, when none was left).
    """
    result = await run_storage(queries.delete_owned, request.auth, _checked(session_id))
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
        frames.append({"type": "notification", "level": "info", "session_id": deleted.id,
                       "content": f"{result.dropped_queued} queued message(s) of the deleted dialog will not run."})
    await _publish(deleted.channel, deleted.chat_id, *frames)
    return Status(204, None)


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE")

ALLOWED_METHODS: dict[str, str | None] = {}
"""URL name of each path (its first operation's view name) → its ``Allow`` list (``None``: the
catch-all of unknown paths). ``conversations.api.middleware`` uses it for the 405 of methods no
operation can be declared for (``PROPFIND``, ``FOO``…)."""


@api.api_operation(list(_METHODS), "/{path:unknown}", auth=None, include_in_schema=False)
async def unknown_path(request: HttpRequest, unknown: str) -> None:
    """Any other path under ``/api/``: a JSON 404, like every other error."""
    raise ApiError(404, "not_found", "no such endpoint; see /api/docs")


def _not_allowed_view(path: str, allowed: list[str]) -> Any:
    """A view raising 405 ``method_not_allowed`` (with ``Allow``) for ``path``'s other methods."""
    listed = ", ".join(allowed)

    def refuse() -> None:
        raise ApiError(405, "method_not_allowed", f"this path answers {listed}", headers={"Allow": listed})

    if "{path:session_id}" in path:
        async def not_allowed(request: HttpRequest, session_id: str) -> None:
            refuse()
    else:
        async def not_allowed(request: HttpRequest) -> None:
            refuse()
    not_allowed.__name__ = "not_allowed_" + "".join(c if c.isalnum() else "_" for c in path).strip("_")
    return not_allowed


def _answer_other_methods_with_json_405() -> None:
    """Give every path a hidden operation for the methods it does not serve: a JSON 405 with
    ``Allow`` (ninja's own is plain text). A path with GET answers HEAD too (the middleware runs
    it as GET without the body), so HEAD is listed in ``Allow`` and never refused."""
    for path, view in list(api.default_router.path_operations.items()):
        served = {method for op in view.operations for method in op.methods}
        url_name = view.operations[0].view_func.__name__
        if view.operations[0].view_func is unknown_path:
            ALLOWED_METHODS[url_name] = None
            continue
        allowed = sorted(served | ({"HEAD"} if "GET" in served else set()))
        ALLOWED_METHODS[url_name] = ", ".join(allowed)
        missing = [method for method in _METHODS if method not in allowed]
        if missing:
            api.api_operation(missing, path, auth=None, include_in_schema=False)(_not_allowed_view(path, allowed))


_answer_other_methods_with_json_405()
