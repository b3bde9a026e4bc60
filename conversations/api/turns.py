"""A dialog's running turn: its latest snapshot, and stopping it (PROTOCOL §2).

Both ask the worker that runs the turn through the channel layer (``live``) and degrade when no
worker answers in time: a placeholder snapshot; a stop that is "not acknowledged".
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja import Query, Router, Status

from conversations import storage
from conversations.api import live, queries
from conversations.api.common import SessionId, checked, errors
from conversations.api.errors import ApiError
from conversations.api.schemas import StopOut, TurnOut
from conversations.chat.stops import STOP_ACK_SECONDS
from conversations.storage.runner import run_storage

router = Router()


@router.get("/dialogs/{path:session_id}/turn", response={200: TurnOut, **errors(404)}, tags=["turns"])
async def running_turn(request: HttpRequest, session_id: str = SessionId) -> dict:
    """The running turn's latest snapshot (the WebSocket's ``turn_updated.turn``).

    Asked of the worker that runs it through the channel layer; when it does not answer within
    about a second (it died; the turn is reported interrupted once its dialog is taken over), a
    placeholder with ``revision: 0``, ``phase: "queued"``. 404 ``no_running_turn`` when none runs.
    """
    dialog, turn = await run_storage(queries.running_turn, request.auth, checked(session_id))
    if turn is None:
        raise ApiError(404, "no_running_turn", "no turn of this dialog is running")
    return await live.turn_snapshot(turn, dialog.channel, dialog.chat_id)


@router.post(
    "/dialogs/{path:session_id}/stop", response={202: StopOut, **errors(403, 404, 409)}, tags=["turns"]
)
async def stop_turn(
    request: HttpRequest,
    session_id: str = SessionId,
    turn_id: str = Query(
        None,
        min_length=1,
        max_length=64,
        description="stop only this turn (the one the client shows); 409 when it is not running",
    ),
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
    dialog, turn = await run_storage(queries.running_turn, request.auth, checked(session_id))
    running_id = turn["turn_id"] if turn is not None else None
    repeated = (
        await run_storage(storage.repeated_stop, dialog.id, running_id)
        if turn_id is None and running_id is not None
        else None
    )
    if repeated is not None:  # the same stop again, after its turn ended (storage.claims)
        return Status(
            202,
            {
                "session_id": dialog.id,
                "turn_id": repeated,
                "status": "stopping",
                "acknowledged": True,
                "message": "the turn is being cancelled",
            },
        )  # the first answer again
    if turn is None or (turn_id is not None and running_id != turn_id):
        raise ApiError(
            409,
            "not_running",
            "nothing is running in this dialog"
            if turn is None
            else "that turn is not running (any more); nothing was stopped",
        )
    await run_storage(storage.note_stop_requested, dialog.id, running_id)  # binds every server process
    acknowledged = await live.stop_turn(dialog.id, running_id, STOP_ACK_SECONDS)
    if acknowledged:
        message = "the turn is being cancelled"
    else:
        # No worker answered: the turn either ended meanwhile (nothing to stop) or its process died.
        _, still = await run_storage(queries.running_turn, request.auth, dialog.id)
        if still is None or still["turn_id"] != running_id:
            raise ApiError(409, "not_running", "that turn has already ended; nothing was stopped")
        lease = settings.PICOBOT.lease_seconds + settings.PICOBOT.inbox_scan_seconds
        message = (
            "no server is running that turn any more (it was cut off, probably by a restart); "
            f"it will be reported as interrupted within about {lease:.0f} s"
        )
    body = {
        "session_id": dialog.id,
        "turn_id": running_id,
        "status": "stopping",
        "acknowledged": acknowledged,
        "message": message,
    }
    return Status(202, body)
