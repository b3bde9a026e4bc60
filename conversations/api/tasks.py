"""Background tasks over REST (issue 18, seed 000 §9): the caller's tasks, and stopping one —
what ``/tasks`` and ``/stop task <id>`` do on the chat command path (``chat.task_commands``).

Another user's task is a 404 like an unknown one. A stop marks the task and asks every worker;
the one running it cancels it, and its end (``cancelled``) is said to the dialog's chat, unless
the dialog was deleted.
"""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Path, Query, Router, Status

from conversations.api.common import errors
from conversations.api.schemas import TaskPage, TaskStopOut
from conversations.runtime.agent_channel import request_task_stop
from conversations.storage import tasks as task_rows
from conversations.storage.runner import run_storage

router = Router()

TaskId = Path(..., min_length=1, max_length=40, description="the task's id (`/tasks` shows it)")


@router.get("/tasks", response={200: TaskPage, **errors()}, tags=["tasks"])
async def list_tasks(
    request: HttpRequest, limit: int = Query(20, ge=1, le=100, description="at most this many")
) -> dict:
    """The caller's background tasks, newest first."""
    rows = await run_storage(task_rows.user_tasks, request.auth, limit=limit)
    return {"items": [{**row, "session_id": row["dialog_id"]} for row in rows]}


@router.post("/tasks/{task_id}/stop", response={202: TaskStopOut, **errors(403, 404)}, tags=["tasks"])
async def stop_task(request: HttpRequest, task_id: str = TaskId) -> Status:
    """Stop one of the caller's tasks: 202, ``stopping`` true when it was running (it ends
    ``cancelled`` within moments; ``GET /api/tasks`` shows it), false when it had ended."""
    row = await run_storage(task_rows.request_task_stop, request.auth, task_id)
    running = row["status"] == task_rows.RUNNING
    if running:
        await request_task_stop(row["id"])
    return Status(202, {"id": row["id"], "status": row["status"], "stopping": running})
