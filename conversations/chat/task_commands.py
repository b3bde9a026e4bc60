"""``/tasks`` and ``/stop task ID``: the user's background tasks on the command path (issue 18).

Every channel's commands go through ``chat.commands`` (WebUI, TUI, Feishu), so these mean the same
everywhere. A task id that is unknown or another user's answers ``not_found`` alike. ``/stop task``
marks the row (``stop_requested_at``) and asks every worker over the layer; the worker running
the task cancels it, and the task's end (``cancelled``) is announced with a chat notice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from conversations.agent.background_tasks import excerpt
from conversations.chat.command_text import dialog_label
from conversations.models import now_ms
from conversations.runtime.agent_channel import request_task_stop
from conversations.storage import tasks as task_rows
from conversations.storage.runner import run_storage
from conversations.storage.tasks import DIALOG_DELETED_ERROR

LIST_LIMIT = 10


def tasks_text(rows: list[dict], now: int) -> str:
    """``/tasks``'s answer: one line per task, newest first: id, status, elapsed, the dialog,
    the prompt's excerpt (and a failure's error)."""
    if not rows:
        return "No background tasks yet. The assistant starts them with its spawn_task tool."
    lines = [f"Your background tasks (newest first, at most {LIST_LIMIT}):"]
    for row in rows:
        elapsed = ((row["finished_at"] or now) - row["started_at"]) / 1000
        started = datetime.fromtimestamp(row["started_at"] / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
        line = (
            f"{row['id']} · {row['status']} · {_duration(elapsed)} · started {started} · "
            f"“{excerpt(row['prompt'])}” in {dialog_label(row['dialog_title'], row['dialog_id'])}"
        )
        if row.get("dialog_deleted"):
            line += " (deleted)"
        if row["status"] == "failed" and row["error"]:
            line += f" — {excerpt(row['error'], 120)}"
        lines.append(line)
    lines.append("Stop a running one with /stop task <id>.")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


async def list_tasks(client: Any) -> dict:
    """The ``notification`` frame answering ``/tasks``."""
    rows = await run_storage(task_rows.user_tasks, client.user, limit=LIST_LIMIT)
    return {"type": "notification", "level": "info", "content": tasks_text(rows, now_ms())}


async def stop_task(client: Any, task_id: str) -> dict:
    """Ask to stop the user's task ``task_id``: the ``notification`` frame to answer with.

    Raises:
        storage.NotFoundError: no such task of the user (the caller answers ``not_found``).
    """
    row = await run_storage(task_rows.request_task_stop, client.user, task_id)
    if row["status"] != "running":
        why = ": its dialog was deleted" if row["error"] == DIALOG_DELETED_ERROR else ""
        content = f"Task {row['id']} already ended ({row['status']}){why}."
    else:
        await request_task_stop(row["id"])
        content = (
            f"Task {row['id']} is stopping: its dialog was deleted."  # it ends without a notice
            if row["dialog_deleted"]
            else f"Stopping task {row['id']}; you are told when it has stopped."
        )
    frame = {"type": "notification", "level": "info", "content": content}
    return frame if row["dialog_deleted"] else {**frame, "session_id": row["dialog_id"]}
