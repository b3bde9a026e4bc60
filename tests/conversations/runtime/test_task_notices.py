"""A background task that ends without a turn is said to the chat even when nobody was connected
(issue 18 "Must show" 4: "a restart while the task runs ends it as interrupted with a notice,
never twice"): the task row keeps its notice until a connection sent it on ``ready``. A user's own
``/stop task`` is said at once and never again."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.models import BackgroundTask, Dialog
from providers.testing import script_text
from tests.conversations.conftest import make_token
from tests.conversations.runtime.test_background_tasks import (
    TaskProvider,
    hanging_task_provider,
    spawn,
    start,
    until_ended,
    until_started,
)

pytestmark = [pytest.mark.django_db(transaction=True)]


async def connected(connect, token: str):
    """A new connection, once everything it sends on ``ready`` arrived (the answer to a command
    comes after it: pending notices are sent while connecting, before frames are read)."""
    client = await connect(token)
    await client.until("ready")
    await client.send({"type": "message", "content": "/tasks"})
    await client.until("notification", lambda f: f["content"].startswith("Your background tasks"))
    return client


def task_notices(client, task_id: str) -> list[dict]:
    return [f for f in client.of_type("notification") if f.get("id") == f"task:{task_id}"]


@database_sync_to_async
def row(task_id: str) -> BackgroundTask:
    return BackgroundTask.objects.get(pk=task_id)


async def test_a_task_interrupted_while_nobody_is_connected_is_said_on_the_next_connect_once(
    connect, start_worker
):
    provider = hanging_task_provider()
    first = await start(start_worker, provider, worker_id="host-a")
    token = await make_token()
    client = await connect(token)
    ready = await client.until("ready")
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    await client.until("turn_committed")
    task = await until_started()
    await client.close()  # nobody is connected when the process stops

    await first.stop(timeout=5)
    ended = await until_ended(task.id)
    assert ended.status == "interrupted" and ended.notice_level == "warning"
    assert ended.notice_sent_at is None

    again = await connected(connect, token)
    (notice,) = task_notices(again, task.id)
    assert notice["session_id"] == ready["active_session_id"] and notice["level"] == "warning"
    assert (
        f"Background task {task.id}" in notice["content"]
        and "its server process stopped" in notice["content"]
    )
    assert (await row(task.id)).notice_sent_at is not None

    third = await connected(connect, token)
    assert task_notices(third, task.id) == []
    assert len(provider.task_requests) == 1  # never run again


async def test_a_stopped_task_is_said_once_to_the_user_who_stopped_it_and_not_again(connect, start_worker):
    await start(start_worker, hanging_task_provider())
    token = await make_token()
    client = await connect(token)
    await client.until("ready")
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    task = await until_started()
    await client.send({"type": "message", "content": f"/stop task {task.id}"})
    stopped = await client.until("notification", lambda f: "was stopped" in f["content"])
    assert stopped["id"] == f"task:{task.id}"
    assert (await until_ended(task.id)).notice_sent_at is not None

    again = await connected(connect, token)
    assert task_notices(again, task.id) == []
    # Deleting its dialog afterwards does not rewrite why it ended.
    dialog = await database_sync_to_async(Dialog.objects.select_related("owner").get)(pk=task.dialog_id)
    await database_sync_to_async(storage.delete_dialog)(
        dialog.owner, dialog.channel, dialog.chat_id, dialog.id
    )
    await again.send({"type": "message", "content": f"/stop task {task.id}"})
    answer = await again.until("notification", lambda f: f["content"].startswith(f"Task {task.id}"))
    assert answer["content"] == f"Task {task.id} already ended (cancelled)."


async def test_a_task_whose_process_stopped_before_it_read_the_delete_says_its_dialog_was_deleted(
    connect, start_worker
):
    worker, _, token, task = await task_of_a_deleted_dialog(connect, start_worker)
    await worker.stop(timeout=5)  # before any heartbeat: the shutdown ends it interrupted
    ended = await until_ended(task.id)
    assert (ended.status, ended.error, ended.notice) == ("interrupted", "its dialog was deleted", "")
    client = await connected(connect, token)
    assert task_notices(client, task.id) == []
    await client.send({"type": "message", "content": f"/stop task {task.id}"})
    answer = await client.until("notification", lambda f: f["content"].startswith(f"Task {task.id}"))
    assert answer["content"] == f"Task {task.id} already ended (interrupted): its dialog was deleted."


async def test_a_client_connected_when_a_task_is_interrupted_is_told_once_and_not_again(
    connect, start_worker
):
    first = await start(start_worker, hanging_task_provider(), worker_id="host-a")
    token = await make_token()
    client = await connect(token)
    await client.until("ready")
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    task = await until_started()
    await first.stop(timeout=5)
    await client.until("notification", lambda f: f.get("id") == f"task:{task.id}")
    for _ in range(200):  # the connection that sent it on marks it received
        if (await row(task.id)).notice_sent_at is not None:
            break
        await asyncio.sleep(0.02)
    assert (await row(task.id)).notice_sent_at is not None

    again = await connected(connect, token)
    assert task_notices(again, task.id) == []


async def logged(caplog, line: str) -> None:
    """Wait until ``line`` was logged (a task's end is written before its log line)."""
    for _ in range(250):
        if line in caplog.text:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not logged: {line!r}")


async def task_of_a_deleted_dialog(connect, start_worker):
    """A running task whose dialog the user just deleted: ``(worker, client, token, task)``."""
    worker = await start(start_worker, hanging_task_provider())
    token = await make_token()
    client = await connect(token)
    await client.until("ready")
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    await client.until("turn_committed")
    task = await until_started()
    dialog = await database_sync_to_async(Dialog.objects.select_related("owner").get)(pk=task.dialog_id)
    await database_sync_to_async(storage.delete_dialog)(
        dialog.owner, dialog.channel, dialog.chat_id, dialog.id
    )
    return worker, client, token, task


async def listed_tasks(client) -> str:
    await client.send({"type": "message", "content": "/tasks"})
    return (await client.until("notification", lambda f: f["content"].startswith("Your background")))[
        "content"
    ]


async def test_deleting_the_dialog_stops_its_task_without_a_notice(connect, start_worker, caplog):
    worker, client, token, task = await task_of_a_deleted_dialog(connect, start_worker)
    caplog.set_level("INFO", "conversations.runtime.background_tasks")
    await worker.tasks.beat()  # the heartbeat reads the stop the delete asked for
    ended = await until_ended(task.id)
    await logged(caplog, f"background task {task.id} cancelled: its dialog was deleted")
    assert (ended.status, ended.error, ended.notice, ended.notification_inbox_id) == (
        "cancelled",
        "its dialog was deleted",
        "",
        None,
    )
    listed = await listed_tasks(client)
    assert f"{task.id} · cancelled" in listed and "(deleted)" in listed
    assert task_notices(client, task.id) == []
    again = await connected(connect, token)
    assert task_notices(again, task.id) == []
    await again.send({"type": "message", "content": f"/stop task {task.id}"})
    answer = await again.until("notification", lambda f: f["content"].startswith(f"Task {task.id}"))
    assert answer["content"] == f"Task {task.id} already ended (cancelled): its dialog was deleted."


async def test_a_task_the_delete_did_not_mark_is_stopped_by_the_heartbeat_all_the_same(connect, start_worker):
    """A task inserted while the delete ran (it did not see it) has no ``stop_requested_at``."""
    worker, _, _, task = await task_of_a_deleted_dialog(connect, start_worker)
    await database_sync_to_async(
        lambda: BackgroundTask.objects.filter(pk=task.id).update(stop_requested_at=None)
    )()
    await worker.tasks.beat()
    ended = await until_ended(task.id)
    assert (ended.status, ended.error, ended.notice) == ("cancelled", "its dialog was deleted", "")


async def test_stop_task_after_its_dialog_was_deleted_promises_no_notice(connect, start_worker, caplog):
    _, client, _, task = await task_of_a_deleted_dialog(connect, start_worker)
    caplog.set_level("INFO", "conversations.runtime.background_tasks")
    await client.send({"type": "message", "content": f"/stop task {task.id}"})
    answer = await client.until("notification", lambda f: task.id in f["content"])
    assert answer["content"] == f"Task {task.id} is stopping: its dialog was deleted."
    assert "session_id" not in answer  # the dialog is gone
    ended = await until_ended(task.id)  # the layer's stop is at once, without a heartbeat
    assert (ended.status, ended.error, ended.notice) == ("cancelled", "its dialog was deleted", "")
    await listed_tasks(client)
    assert task_notices(client, task.id) == []
    # The log says what the row says, though the user's stop came first.
    await logged(caplog, f"background task {task.id} cancelled: its dialog was deleted")


async def test_a_tasks_own_tokens_count_for_the_budget_check_of_its_notification(
    connect, start_worker, settings
):
    """The task's usage rows are written before its end decides whether its result is queued."""
    settings.PICOBOT = settings.PICOBOT.replace(user_daily_tokens=40)
    provider = TaskProvider(
        parent=[spawn("c1"), script_text("started", usage=None)],  # the parent uses 15 tokens
        task=[script_text("done", usage=(30, 0))],  # the task 30 more: past 40
    )
    await start(start_worker, provider)
    token = await make_token()
    client = await connect(token)
    await client.until("ready")
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    task = await until_started()
    notice = await client.until("notification", lambda f: f.get("id") == f"task:{task.id}")
    assert (
        notice["level"] == "warning" and "completed, but its result could not be queued" in notice["content"]
    )
    assert "(Your daily token budget (40 tokens; " in notice["content"]
    ended = await until_ended(task.id)
    assert ended.notification_inbox_id is None and ended.notice == notice["content"]


async def test_a_failing_mark_is_logged_and_leaves_the_notice_pending(monkeypatch, caplog):
    """A connection that cannot mark a broadcast notice received goes on; the next connect resends it."""
    from conversations.chat import ready_notices

    async def failing(*args: object) -> None:
        raise RuntimeError("database gone")

    monkeypatch.setattr(ready_notices, "run_storage", failing)
    await ready_notices.mark_received({"id": "task:abc"})
    assert any("could not mark a notice received" in r.message for r in caplog.records)


def test_a_connection_sends_each_kept_notice_once_whichever_path_came_first():
    from conversations.chat.ready_notices import KeptNoticesSent

    sent = KeptNoticesSent()
    assert sent.first_time({"id": "task:abc"}) and not sent.first_time({"id": "task:abc"})
    assert sent.first_time({"inbox_id": 7}) and not sent.first_time({"inbox_id": "7"})
    assert sent.first_time({"id": "7"})  # a notification id and an inbox id never collide
