"""Background tasks over REST (issue 18): ``GET /api/tasks`` lists what ``/tasks`` lists, with the
result; ``POST /api/tasks/{id}/stop`` stops a running one as ``/stop task`` does. Another user's
task is a 404 like an unknown one."""

from __future__ import annotations

import pytest
from channels.layers import get_channel_layer

from providers.testing import script_text
from tests.conversations.api.conftest import ApiClient
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


async def test_a_running_task_is_listed_and_stopped_over_rest_and_the_chat_is_told(connect, start_worker):
    await start(start_worker, hanging_task_provider())
    token = await make_token("alice")
    client = await connect(token)
    ready = await client.until("ready")
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    task = await until_started()
    api = ApiClient(token)

    (item,) = (await api.get("/tasks")).json()["items"]
    assert (item["id"], item["status"], item["session_id"], item["finished_at"]) == (
        task.id,
        "running",
        ready["active_session_id"],
        None,
    )
    assert item["prompt"] == "count the files" and item["dialog_deleted"] is False

    bob = ApiClient(await make_token("bob"))
    assert (await bob.post(f"/tasks/{task.id}/stop")).status_code == 404
    assert (await bob.get("/tasks")).json()["items"] == []
    assert (await api.post("/tasks/nosuchtask/stop")).status_code == 404

    stopped = await api.post(f"/tasks/{task.id}/stop")
    assert (stopped.status_code, stopped.json()) == (
        202,
        {"id": task.id, "status": "running", "stopping": True},
    )
    assert (await until_ended(task.id)).status == "cancelled"
    await client.until("notification", lambda f: f.get("id") == f"task:{task.id}")
    again = await api.post(f"/tasks/{task.id}/stop")
    assert again.json() == {"id": task.id, "status": "cancelled", "stopping": False}


async def test_a_completed_task_is_listed_with_its_result_and_usage(connect, start_worker):
    provider = TaskProvider(
        parent=[spawn("c1"), script_text("started"), script_text("it found 3")],
        task=[script_text("There are 3 files.", usage=(20, 5))],
    )
    await start(start_worker, provider)
    token = await make_token("alice")
    client = await connect(token)
    await client.until("ready")
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    task = await until_ended()
    (item,) = (await ApiClient(token).get("/tasks", query_params={"limit": 1})).json()["items"]
    assert (item["status"], item["result"], item["iterations"]) == ("completed", "There are 3 files.", 1)
    assert (item["input_tokens"], item["output_tokens"]) == (20, 5) and item["finished_at"] >= task.started_at
    assert (await ApiClient(token).get("/tasks", query_params={"limit": 0})).status_code == 422


async def test_a_stop_the_layer_could_not_carry_is_read_by_the_heartbeat(
    connect, start_worker, monkeypatch, caplog
):
    """The stop is marked on the task's row before the layer is asked: a layer that fails costs
    the caller nothing, and the owner's next heartbeat stops the task."""
    worker = await start(start_worker, hanging_task_provider())
    token = await make_token("alice")
    client = await connect(token)
    await client.until("ready")
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    task = await until_started()
    layer = get_channel_layer()
    real_group_send = layer.group_send

    async def failing_task_stop(group: str, message: dict) -> None:
        if message.get("type") == "task.stop":
            raise ConnectionError("the layer is down")
        await real_group_send(group, message)

    monkeypatch.setattr(layer, "group_send", failing_task_stop)
    stopped = await ApiClient(token).post(f"/tasks/{task.id}/stop")
    assert (stopped.status_code, stopped.json()["stopping"]) == (202, True)
    assert f"could not ask the workers to stop task {task.id}" in caplog.text
    assert (await until_started()).status == "running"
    await worker.tasks.beat()
    ended = await until_ended(task.id)
    assert (ended.status, ended.error) == ("cancelled", "stopped by the user")
