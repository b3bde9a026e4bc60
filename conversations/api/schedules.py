"""Scheduled prompts over REST (issue 18): the caller's schedules (all, or a dialog's), adding,
changing (pausing) and deleting one.

The same rules as ``/schedule`` (``chat.schedule_command``): a bad ``cron``, ``tz`` or ``prompt``
is a 422 ``invalid_schedule`` whose ``errors`` name the field; more than
``PICOBOT_SCHEDULES_PER_USER`` a 409 ``schedule_limit``; another user's schedule or dialog a 404.
"""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Path, Router, Status

from conversations import storage
from conversations.agent.schedule_timing import ScheduleSpecError
from conversations.api.common import SessionId, checked, errors
from conversations.api.errors import ApiError
from conversations.api.schemas import ScheduleCreate, ScheduleOut, SchedulePage, ScheduleUpdate
from conversations.storage.runner import run_storage

router = Router()

ScheduleId = Path(..., ge=1, le=2**62, description="the schedule's id (`/schedule list` shows it)")


@router.get("/schedules", response={200: SchedulePage}, tags=["schedules"])
async def list_all_schedules(request: HttpRequest) -> dict:
    """All the caller's scheduled prompts, of every live dialog, oldest first."""
    return {"items": await run_storage(storage.schedules_of, request.auth)}


@router.get(
    "/dialogs/{path:session_id}/schedules", response={200: SchedulePage, **errors(404)}, tags=["schedules"]
)
async def list_schedules(request: HttpRequest, session_id: str = SessionId) -> dict:
    """The dialog's scheduled prompts, oldest first."""
    dialog = await run_storage(storage.dialog_for_user, request.auth, checked(session_id))
    return {"items": await run_storage(storage.schedules_of, request.auth, dialog_id=dialog.id)}


@router.post(
    "/dialogs/{path:session_id}/schedules",
    response={201: ScheduleOut, **errors(403, 404, 409)},
    tags=["schedules"],
)
async def create_schedule(
    request: HttpRequest, payload: ScheduleCreate, session_id: str = SessionId
) -> Status:
    """A new scheduled prompt of the dialog: 201 with it (``next_run_at``: its first due time)."""
    dialog = await run_storage(storage.dialog_for_user, request.auth, checked(session_id))
    try:
        item = await run_storage(
            storage.create_schedule, dialog, payload.cron, payload.prompt, payload.tz, enabled=payload.enabled
        )
    except ScheduleSpecError as exc:
        raise _invalid(exc) from None
    except storage.ScheduleLimitError as exc:
        raise ApiError(409, "schedule_limit", str(exc)) from None
    return Status(201, item)


@router.patch("/schedules/{schedule_id}", response={200: ScheduleOut, **errors(403, 404)}, tags=["schedules"])
async def update_schedule(
    request: HttpRequest, payload: ScheduleUpdate, schedule_id: int = ScheduleId
) -> dict:
    """Change one of the caller's schedules: only the fields given. ``enabled: false`` pauses it;
    resuming, or a new ``cron`` or ``tz``, counts from now (the times between are not missed)."""
    try:
        return await run_storage(
            storage.update_schedule, request.auth, schedule_id, **payload.model_dump(exclude_none=True)
        )
    except ScheduleSpecError as exc:
        raise _invalid(exc) from None


def _invalid(exc: ScheduleSpecError) -> ApiError:
    issue = {"loc": ["body", exc.field], "msg": exc.reason, "type": "value_error"}
    return ApiError(422, "invalid_schedule", str(exc), extra={"errors": [issue]})


@router.delete("/schedules/{schedule_id}", response={204: None, **errors(403, 404)}, tags=["schedules"])
async def delete_schedule(request: HttpRequest, schedule_id: int = ScheduleId) -> Status:
    """Delete one of the caller's schedules (of any dialog) and its run records. 204."""
    await run_storage(storage.delete_schedule, request.auth, schedule_id)
    return Status(204, None)
