"""Background tasks (issue 18 "Must show" 4, seed 000 §9): ``spawn_task`` starts a bounded sub-agent;
its completion is a TaskNotification answered as its own turn after the parent's; a restart ends a
running task interrupted with one notice and never runs it again; /tasks and /stop task."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.agent.automated_input import TASK_NOTIFICATION
from conversations.agent.background_tasks import SUB_AGENT_PROMPT
from conversations.agent.tool_registry import ToolRegistry
from conversations.auth import get_or_create_user
from conversations.models import BackgroundTask, Dialog, InboxMessage, UsageRecord, now_ms
from conversations.runtime.agent_channel import wake_dialog
from conversations.runtime.turn_sinks import API_CHANNEL
from conversations.tools.builtin import current_time_tool
from conversations.tools.tasks import spawn_task_tool
from conversations.usage.writer import flush_usage
from providers.base import LLMProvider
from providers.chunks import ProviderChunk
from providers.testing import script_text, script_tool_call
from providers.types import ProviderRequest
from tests.conversations.conftest import make_token


class TaskProvider(LLMProvider):
    """Plays the parent dialog's scripts and the sub-agents' scripts, each in order; a sub-agent's
    request is the one whose system prompt is ``SUB_AGENT_PROMPT``. A script may be an
    ``asyncio.Event`` followed by chunks: the stream waits for the event first."""

    name = "scripted"
    model = "scripted-model"

    def __init__(self, parent: list, task: list) -> None:
        self.parent, self.task = list(parent), list(task)
        self.parent_requests: list[ProviderRequest] = []
        self.task_requests: list[ProviderRequest] = []

    async def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        is_task = request.messages[0].text == SUB_AGENT_PROMPT
        requests, scripts = (
            (self.task_requests, self.task) if is_task else (self.parent_requests, self.parent)
        )
        requests.append(request)
        if len(requests) > len(scripts):
            raise RuntimeError(f"no script left for {'task' if is_task else 'parent'} call #{len(requests)}")
        for item in scripts[len(requests) - 1]:
            if isinstance(item, asyncio.Event):
                await item.wait()
            else:
                yield item


def spawn(call_id: str, **arguments: object) -> list:
    return script_tool_call(call_id, "spawn_task", {"prompt": "count the files", **arguments})


def hanging_task_provider() -> TaskProvider:
    """The parent spawns one task (call ``c1``) and answers "started"; the task never ends by itself."""
    return TaskProvider(
        parent=[spawn("c1"), script_text("started")], task=[[asyncio.Event(), *script_text("x")]]
    )


async def start(start_worker: Callable, provider: LLMProvider, worker_id: str = "test-host:serve") -> object:
    registry = ToolRegistry([current_time_tool()])
    worker = await start_worker(provider, worker_id=worker_id, tools=registry)
    registry.register(spawn_task_tool(worker.tasks))
    return worker


@database_sync_to_async
def tasks() -> list[BackgroundTask]:
    return list(BackgroundTask.objects.order_by("started_at"))


async def until_ended(task_id: str | None = None, timeout: float = 10) -> BackgroundTask:
    """The first (or ``task_id``'s) task once it is no longer running."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        rows = [t for t in await tasks() if task_id is None or t.id == task_id]
        if rows and rows[0].status != BackgroundTask.Status.RUNNING:
            return rows[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"the task did not end within {timeout} s: {await tasks()}")


async def until_started(timeout: float = 10) -> BackgroundTask:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        rows = await tasks()
        if rows:
            return rows[0]
        await asyncio.sleep(0.02)
    raise AssertionError("no task started")


async def chat(connect: Callable, username: str = "alice") -> tuple[object, str]:
    client = await connect(await make_token(username))
    ready = await client.until("ready")
    return client, ready["active_session_id"]


def tool_blocks(frame: dict) -> list[str]:
    return [b.get("name") for b in frame["turn"].get("blocks", []) if b.get("type") == "tool"]


@pytest.mark.django_db(transaction=True)
async def test_a_completion_arriving_mid_turn_is_answered_after_the_parent_turn(connect, start_worker):
    parent_gate = asyncio.Event()
    provider = TaskProvider(
        parent=[
            spawn("call_1"),
            [parent_gate, *script_text("I started a task for that.")],
            script_text("The task counted 42 files."),
        ],
        task=[script_text("There are 42 files.", usage=(30, 12))],
    )
    await start(start_worker, provider)
    client, session = await chat(connect)
    await client.send({"type": "message", "content": "count my files", "client_msg_id": "m1"})

    # The task finishes while the parent turn still runs: its notification waits in the inbox.
    task = await until_ended()
    assert (task.status, task.result, task.parent_turn_id != "", task.tool_call_id) == (
        "completed",
        "There are 42 files.",
        True,
        "call_1",
    )
    assert (task.input_tokens, task.output_tokens, task.iterations) == (30, 12, 1)
    queued = await database_sync_to_async(
        lambda: InboxMessage.objects.get(pk=task.notification_inbox_id).status
    )()
    assert queued == InboxMessage.Status.QUEUED

    parent_gate.set()
    first = await client.until("turn_committed")
    second = await client.until("turn_committed")
    assert first["messages"][0]["content"] == "count my files" and first["messages"][0]["origin"] is None
    spawned = next(m for m in first["messages"] if m["role"] == "tool")
    assert spawned["content"].startswith(f"Task {task.id} started in the background")
    notification = second["messages"][0]
    assert notification["origin"] == {
        "kind": TASK_NOTIFICATION,
        "ref": task.id,
        "label": f"Background task {task.id} completed",
    }
    assert "Result:\nThere are 42 files." in notification["content"]
    assert second["messages"][-1]["content"] == "The task counted 42 files."
    # The sub-agent's work is no part of the parent turn's progress: only spawn_task shows.
    updates = [
        f for f in client.of_type("turn_updated") if f["turn"]["id"] == first["messages"][0]["turn_id"]
    ]
    assert {name for f in updates for name in tool_blocks(f)} == {"spawn_task"}
    # Its provider calls are metered as kind "task".
    await flush_usage(timeout=5)
    kinds = await database_sync_to_async(lambda: list(UsageRecord.objects.values_list("kind", "turn_id")))()
    assert ("task", task.id) in kinds
    # The sub-agent got its own prompt and nothing of the dialog.
    sent = provider.task_requests[0]
    assert [m.role for m in sent.messages] == ["system", "user"] and sent.messages[
        1
    ].text == "count the files"


@pytest.mark.django_db(transaction=True)
async def test_a_task_calls_only_its_tools_and_never_spawn_task(connect, start_worker):
    provider = TaskProvider(
        parent=[spawn("call_1", tools=[]), script_text("started"), script_text("noted")],
        task=[
            script_tool_call("t1", "current_time", {}),
            script_tool_call("t2", "spawn_task", {"prompt": "again"}),
            script_text("done"),
        ],
    )
    await start(start_worker, provider)
    client, _ = await chat(connect)
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    task = await until_ended()
    assert task.status == "completed" and task.tools == []
    assert provider.task_requests[0].tools == []  # nothing offered
    results = [m.content[0].content for m in provider.task_requests[-1].messages if m.role == "tool"]
    assert results == [
        "Error: unknown tool 'current_time'; available: none",
        "Error: unknown tool 'spawn_task'; available: none",
    ]
    assert len(await tasks()) == 1  # no recursion


@pytest.mark.django_db(transaction=True)
async def test_a_one_request_v1_dialog_is_offered_no_spawn_task_and_cannot_call_it(connect, start_worker):
    """Such a dialog is deleted once its turn ended, and a delete stops its tasks: a task started
    there could never report back, so the tool is neither offered nor callable there."""
    provider = TaskProvider(parent=[spawn("c1"), script_text("done"), script_text("hi")], task=[])
    await start(start_worker, provider)
    user = (await database_sync_to_async(get_or_create_user)("alice"))[0]
    dialog = await database_sync_to_async(storage.open_request_dialog)(user, API_CHANNEL, f"{user.pk}.r1", [])
    await database_sync_to_async(storage.accept_message)(
        user, API_CHANNEL, dialog.chat_id, "count my files", session_id=dialog.id
    )
    await wake_dialog(dialog.id)
    for _ in range(500):
        if len(provider.parent_requests) == 2:
            break
        await asyncio.sleep(0.02)
    first, after_call = provider.parent_requests
    assert [t.name for t in first.tools] == ["current_time"]
    (result,) = [m.content[0].content for m in after_call.messages if m.role == "tool"]
    assert result.startswith("Error: unknown tool 'spawn_task'")
    assert await tasks() == []
    # A chat's dialog is offered it.
    client, _ = await chat(connect)
    await client.send({"type": "message", "content": "hello", "client_msg_id": "m1"})
    await client.until("turn_committed")
    assert [t.name for t in provider.parent_requests[-1].tools] == ["current_time", "spawn_task"]


@pytest.mark.django_db(transaction=True)
async def test_spawn_task_refuses_recursion_unknown_tools_and_limits_over_the_caps(
    connect, start_worker, settings
):
    settings.PICOBOT = settings.PICOBOT.replace(task_max_iterations=5)
    provider = TaskProvider(
        parent=[
            spawn("c1", tools=["spawn_task"]),
            spawn("c2", tools=["nope"]),
            spawn("c3", max_iterations=6),
            script_text("none of them started"),
        ],
        task=[],
    )
    await start(start_worker, provider)
    client, _ = await chat(connect)
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    committed = await client.until("turn_committed")
    errors = [m["content"] for m in committed["messages"] if m["role"] == "tool"]
    assert "cannot start background tasks" in errors[0]
    assert "unknown tools 'nope'; available: current_time" in errors[1]
    assert "max_iterations" in errors[2] and all(
        m["is_error"] for m in committed["messages"] if m["role"] == "tool"
    )
    assert await tasks() == []


@pytest.mark.django_db(transaction=True)
async def test_the_iteration_limit_ends_a_task_failed_and_its_turn_says_why(connect, start_worker):
    provider = TaskProvider(
        parent=[spawn("c1", max_iterations=2), script_text("started"), script_text("it failed, sorry")],
        task=[script_tool_call("t1", "current_time", {}), script_tool_call("t2", "current_time", {})],
    )
    await start(start_worker, provider)
    client, _ = await chat(connect)
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    task = await until_ended()
    assert task.status == "failed" and task.error == "reached its limit of 2 model requests before finishing"
    assert len(provider.task_requests) == 2
    await client.until("turn_committed")
    second = await client.until("turn_committed")
    assert second["messages"][0]["origin"]["label"] == f"Background task {task.id} failed"
    assert "Error: reached its limit of 2 model requests" in second["messages"][0]["content"]


@pytest.mark.django_db(transaction=True)
async def test_the_time_limit_ends_a_task_failed(connect, start_worker):
    never = asyncio.Event()
    provider = TaskProvider(
        parent=[spawn("c1", max_seconds=0.3), script_text("started"), script_text("it timed out")],
        task=[[never, *script_text("too late")]],
    )
    await start(start_worker, provider)
    client, _ = await chat(connect)
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    task = await until_ended()
    assert (task.status, task.error) == ("failed", "ran past its time limit of 0.3 s")


@pytest.mark.django_db(transaction=True)
async def test_a_restart_ends_a_running_task_interrupted_with_one_notice_and_never_runs_it_again(
    connect, start_worker
):
    provider = hanging_task_provider()
    first = await start(start_worker, provider, worker_id="host-a")
    client, session = await chat(connect)
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    await client.until("turn_committed")
    task = await until_started()
    assert task.status == "running" and task.worker_id == "host-a"

    await first.stop(timeout=5)
    notice = await client.until("notification", lambda f: "interrupted" in f["content"])
    assert notice["session_id"] == session and task.id in notice["content"]
    ended = await until_ended(task.id)
    assert (ended.status, ended.error) == ("interrupted", "its server process stopped")
    assert ended.notification_inbox_id is None  # a notice, no turn

    second = await start(start_worker, provider, worker_id="host-b")
    second.tasks.confirm_seconds = 0
    await second.tasks.beat()
    await second.tasks.sweep()
    await client.send({"type": "message", "content": "/tasks"})
    listing = await client.until("notification", lambda f: f["content"].startswith("Your background tasks"))
    assert f"{task.id} · interrupted" in listing["content"]
    assert (
        len([f for f in client.of_type("notification") if "its server process stopped" in f["content"]]) == 1
    )
    assert len(provider.task_requests) == 1  # never run again


@database_sync_to_async
def orphan_task(dialog_id: str, worker_id: str, heartbeat_at: int) -> str:
    dialog = Dialog.objects.get(pk=dialog_id)
    return BackgroundTask.objects.create(
        id="dead0000ab",
        dialog=dialog,
        owner=dialog.owner,
        prompt="index the wiki",
        worker_id=worker_id,
        heartbeat_at=heartbeat_at,
    ).id


@pytest.mark.django_db(transaction=True)
async def test_a_task_of_a_dead_process_is_interrupted_once_by_whichever_worker_sweeps_first(
    connect, start_worker
):
    provider = TaskProvider(parent=[], task=[])
    one = await start(start_worker, provider, worker_id="host-b")
    two = await start(start_worker, provider, worker_id="host-c")
    client, session = await chat(connect)
    task_id = await orphan_task(session, "host-dead", now_ms() - 3_600_000)
    for worker in (one, two):
        worker.tasks.confirm_seconds = 3600  # seen lapsed, not yet confirmed dead
        await worker.tasks.sweep()
    assert (await until_started()).status == "running"
    for worker in (one, two):
        worker.tasks.confirm_seconds = 0
        await worker.tasks.sweep()
    ended = await until_ended(task_id)
    assert (ended.status, ended.worker_id) == ("interrupted", "host-dead")
    await client.until("notification", lambda f: task_id in f["content"])
    await client.send({"type": "message", "content": "/tasks"})
    await client.until("notification", lambda f: f["content"].startswith("Your background tasks"))
    assert (
        len([f for f in client.of_type("notification") if "its server process stopped" in f["content"]]) == 1
    )


@pytest.mark.django_db(transaction=True)
async def test_a_late_heartbeat_is_slow_not_dead_and_a_still_one_is_dead(connect, start_worker):
    sweeper = await start(start_worker, TaskProvider(parent=[], task=[]), worker_id="host-b")
    _, session = await chat(connect)
    task_id = await orphan_task(session, "host-slow", now_ms() - 3_600_000)
    sweeper.tasks.confirm_seconds = 60

    def age_observation() -> None:  # as if the sweep had seen this heartbeat for two minutes
        observed, seen_at = sweeper.tasks._lapsed[task_id]
        sweeper.tasks._lapsed[task_id] = (observed, seen_at - 120)

    await sweeper.tasks.sweep()
    age_observation()
    await database_sync_to_async(
        lambda: BackgroundTask.objects.filter(pk=task_id).update(heartbeat_at=now_ms() - 3_500_000)
    )()  # it beat since: late (still older than the lease), but alive
    await sweeper.tasks.sweep()
    assert (await until_started()).status == "running"
    age_observation()  # no beat since
    await sweeper.tasks.sweep()
    assert (await until_ended(task_id)).status == "interrupted"


@pytest.mark.django_db(transaction=True)
async def test_a_worker_restarted_under_its_own_id_interrupts_its_previous_tasks_at_once(
    connect, start_worker
):
    _, session = await connect_and_orphan(connect, "test-host:serve")
    await start(start_worker, TaskProvider(parent=[], task=[]))  # same id; its first sweep runs at start
    ended = await until_ended()
    assert ended.status == "interrupted"


async def connect_and_orphan(connect: Callable, worker_id: str) -> tuple[object, str]:
    client, session = await chat(connect)
    await orphan_task(session, worker_id, now_ms())
    return client, session


@pytest.mark.django_db(transaction=True)
async def test_tasks_lists_and_stop_task_stops_only_the_users_own_task(connect, start_worker):
    provider = hanging_task_provider()
    await start(start_worker, provider)
    client, session = await chat(connect)
    await client.send({"type": "message", "content": "/tasks"})
    assert "No background tasks yet" in (await client.until("notification"))["content"]
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    await client.until("turn_committed")
    task = await until_started()

    await client.send({"type": "message", "content": "/tasks"})
    listing = (await client.until("notification", lambda f: "Your background tasks" in f["content"]))[
        "content"
    ]
    assert f"{task.id} · running · " in listing and "“count the files”" in listing

    other, _ = await chat(connect, "bob")
    await other.send({"type": "message", "content": f"/stop task {task.id}"})
    assert (await other.until("error"))["code"] == "not_found"
    await client.send({"type": "message", "content": "/stop task nope"})
    error = await client.until("error")
    assert error["code"] == "not_found" and "no task 'nope'" in error["message"]
    await client.send({"type": "message", "content": "/stop task"})
    assert (await client.until("error"))["code"] == "invalid_command"
    assert (await until_started()).status == "running"

    await client.send({"type": "message", "content": f"/stop task {task.id.upper()}"})
    assert "Stopping task" in (await client.until("notification"))["content"]
    stopped = await client.until("notification", lambda f: "was stopped" in f["content"])
    assert stopped["session_id"] == session
    ended = await until_ended(task.id)
    assert (ended.status, ended.error, ended.notification_inbox_id) == (
        "cancelled",
        "stopped by the user",
        None,
    )
    await client.send({"type": "message", "content": f"/stop task {task.id}"})
    assert "already ended (cancelled)" in (await client.until("notification"))["content"]
    await client.send({"type": "message", "content": "/help"})
    help_text = (await client.until("notification"))["content"]
    assert "/tasks — " in help_text and "/stop [task <id>]" in help_text


@pytest.mark.django_db(transaction=True)
async def test_a_stop_whose_layer_message_was_lost_is_read_by_the_heartbeat(connect, start_worker):
    provider = hanging_task_provider()
    worker = await start(start_worker, provider)
    client, _ = await chat(connect)
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    task = await until_started()
    await database_sync_to_async(
        lambda: BackgroundTask.objects.filter(pk=task.id).update(stop_requested_at=now_ms())
    )()
    await worker.tasks.beat()
    assert (await until_ended(task.id)).status == "cancelled"


@pytest.mark.django_db(transaction=True)
async def test_running_tasks_are_capped_per_user(connect, start_worker, settings):
    settings.PICOBOT = settings.PICOBOT.replace(task_max_running=1)
    never = asyncio.Event()
    provider = TaskProvider(
        parent=[spawn("c1"), spawn("c2"), script_text("one started")],
        task=[[never, *script_text("x")]],
    )
    await start(start_worker, provider)
    client, _ = await chat(connect)
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    committed = await client.until("turn_committed")
    results = [m for m in committed["messages"] if m["role"] == "tool"]
    assert not results[0]["is_error"] and results[1]["is_error"]
    assert "at most 1 background tasks may run at once" in results[1]["content"]
    assert len(await tasks()) == 1


@pytest.mark.django_db(transaction=True)
async def test_a_second_stop_while_the_first_ends_the_task_loses_neither_end_nor_notice(
    connect, start_worker
):
    provider = hanging_task_provider()
    worker = await start(start_worker, provider)
    client, _ = await chat(connect)
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    task = await until_started()
    assert worker.tasks.stop(task.id)
    await asyncio.sleep(0)  # the task is inside its end …
    assert worker.tasks.stop(task.id)  # … when the second stop (or the heartbeat's) comes
    await client.until("notification", lambda f: "was stopped" in f["content"])
    assert (await until_ended(task.id)).status == "cancelled"
    await asyncio.sleep(0.2)
    assert len([f for f in client.of_type("notification") if "was stopped" in f["content"]]) == 1


@pytest.mark.django_db(transaction=True)
async def test_a_task_is_refused_when_its_owner_used_up_the_daily_budget(connect, start_worker, settings):
    """The budget is checked again when a task starts: one spent up during the parent's turn
    (issue 17) refuses the task, and the parent's turn says why."""
    from tests.conversations.usage.test_budgets import spend

    settings.PICOBOT = settings.PICOBOT.replace(user_daily_tokens=1000)
    spent = asyncio.Event()
    provider = TaskProvider(parent=[[spent, *spawn("c1")], script_text("no task then")], task=[])
    await start(start_worker, provider)
    client, _ = await chat(connect)
    await client.send({"type": "message", "content": "go", "client_msg_id": "m1"})
    for _ in range(500):  # the model is asked: the turn got past its own budget check
        if provider.parent_requests:
            break
        await asyncio.sleep(0.01)
    assert provider.parent_requests
    await spend("alice", 1000)
    spent.set()
    committed = await client.until("turn_committed")
    (result,) = [m for m in committed["messages"] if m["role"] == "tool"]
    assert result["is_error"] and "daily token budget" in result["content"]
    assert await tasks() == [] and provider.task_requests == []
