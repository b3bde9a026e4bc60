"""Background tasks in a worker process: run, bound, stop, and detect the dead (issue 18, seed 000 §9).

:class:`BackgroundTaskRunner` is the :class:`~conversations.tools.tasks.TaskStarter` of a worker's
``spawn_task`` tool. Each task is a supervised task of the worker (``AgentWorker.supervisor``):
its own ``AgentLoop`` on the dialog's model preset, with the sub-agent prompt and the task's tool
subset, no sink (its progress is nobody's turn progress), metered under the call scope kind
``task`` (usage rows), bounded by its limits:

- time: ``asyncio.timeout(max_seconds)`` → failed "ran past its time limit";
- iterations: the loop may make ``max_iterations`` model requests; still calling tools after them
  → failed "reached its limit of N model requests";
- tokens: input + output as the provider reports them, checked before each request and after
  each tool batch → failed "used N tokens".

How a task ends (each end is one conditional update, ``storage.tasks.end_task``):

- completed / failed → a ``TaskNotification`` in the dialog's inbox (same transaction), then a
  wake: answered as its own turn when the dialog is free, final-only;
- cancelled (``/stop task ID``, from any process: a ``task.stop`` layer message, or the
  ``stop_requested_at`` the next heartbeat reads) → a chat notice only, no turn;
- interrupted (its worker stops, or dies) → a chat notice only, kept on the row until a client
  received it (``storage.notices``); a task is never run again.

Death: a worker stamps its running tasks' ``heartbeat_at`` every ``PICOBOT_LEASE_RENEW_SECONDS``.
A running task of *another* worker whose heartbeat is older than ``PICOBOT_LEASE_SECONDS`` and
stays the same for two more renewal intervals (slow is not dead, as for leases) is interrupted by
whichever worker sweeps first; a running task under a worker's *own* id that it does not run
belongs to its previous incarnation (a restart with a stable ``PICOBOT_WORKER_ID``) and is
interrupted at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from django.conf import settings

from conversations.agent.background_tasks import (
    SUB_AGENT_PROMPT,
    TaskLimits,
    TaskRequest,
    cut_result,
)
from conversations.agent.failures import new_ref, provider_failure_text
from conversations.agent.loop import AgentLoop, AgentResult
from conversations.agent.tool_registry import ToolContext, ToolError, ToolFatalError, ToolRegistry
from conversations.models import BackgroundTask, now_ms
from conversations.runtime import notify
from conversations.runtime.agent_channel import wake_dialog
from conversations.runtime.provider import ProviderFor, preset_for, turn_provider
from conversations.runtime.supervisor import SupervisorClosedError, TaskSupervisor
from conversations.storage import NotFoundError, task_notice_id
from conversations.storage import tasks as task_rows
from conversations.storage.runner import run_storage
from conversations.usage.writer import usage_writer
from providers.messages import Message
from providers.metering import CallScope, call_scope

log = logging.getLogger(__name__)

Status = BackgroundTask.Status
USAGE_FLUSH_SECONDS = 2.0
INTERRUPTED_ERROR = "its server process stopped"
STOPPED_ERROR = "stopped by the user"
SHUTDOWN_GRACE_SECONDS = 5.0
GONE = "gone"
"""Why a task is cancelled when someone else already ended it: nothing more is written."""
DELETED = "dialog_deleted"
"""Why a task is cancelled when its dialog was deleted: it ends ``cancelled``, saying so."""
_STOP_ENDINGS = {
    Status.CANCELLED: (Status.CANCELLED, STOPPED_ERROR),
    DELETED: (Status.CANCELLED, task_rows.DIALOG_DELETED_ERROR),
}
"""A stop reason's ``(status, error)``; any other reason is a status ended with INTERRUPTED_ERROR."""


def task_caps() -> TaskLimits:
    """The largest limits a task may have (``PICOBOT_TASK_MAX_*``)."""
    config = settings.PICOBOT
    return TaskLimits(config.task_max_seconds, config.task_max_iterations, config.task_max_tokens)


@dataclass
class _Ending:
    status: str
    result: str = ""
    error: str = ""


class BackgroundTaskRunner:
    """A worker's background tasks (see the module docstring).

    Args:
        worker_id: the worker's id: the tasks' owner.
        provider_for: a preset's name → its provider (``AgentWorker.provider_for``).
        supervisor: the worker's supervisor; tasks are spawned there.
        tools: the registry a task's subset is taken from (set by the worker once built).
    """

    def __init__(
        self,
        worker_id: str,
        provider_for: ProviderFor,
        supervisor: TaskSupervisor,
        tools: ToolRegistry | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.provider_for = provider_for
        self.supervisor = supervisor
        self.tools = tools or ToolRegistry()
        self.caps = task_caps()
        self.running: dict[str, asyncio.Task | None] = {}
        """Task id → its asyncio task (None while its row is being created)."""
        self._reasons: dict[str, str] = {}
        self._lapsed: dict[str, tuple[tuple[str, int | None], float]] = {}
        self.closing = False
        self.heartbeat_seconds = settings.PICOBOT.lease_renew_seconds
        self.stale_ms = int(settings.PICOBOT.lease_seconds * 1000)
        self.confirm_seconds = 2 * settings.PICOBOT.lease_renew_seconds

    # --- TaskStarter ----------------------------------------------------------------------------
    def tool_names(self) -> list[str]:
        """The worker's tool names (a task's subset is chosen among them)."""
        return self.tools.names()

    async def start(self, request: TaskRequest, context: ToolContext) -> str:
        """Create the task's row and start it; returns its id.

        Raises:
            ToolError: tasks are off, the user has too many running, the dialog is gone, the
                worker is shutting down.
        """
        max_running = settings.PICOBOT.task_max_running
        if max_running <= 0:
            raise ToolError("background tasks are turned off on this server")
        if self.closing or self.supervisor.closing:
            raise ToolError("the server is shutting down; start the task again in a moment")
        task_id = task_rows.new_task_id()
        self.running[task_id] = None  # before the row exists: the sweep must not take it for a leftover
        try:
            started = await run_storage(
                task_rows.create_task,
                task_id,
                context.dialog_id,
                request,
                worker_id=self.worker_id,
                parent_turn_id=context.turn_id,
                tool_call_id=context.tool_call_id,
                max_running=max_running,
            )
            self.running[task_id] = self.supervisor.spawn(self._run(started, request), name=f"task:{task_id}")
        except task_rows.TaskLimitError as exc:
            raise ToolError(str(exc)) from None
        except NotFoundError:
            raise ToolError("this dialog no longer exists") from None
        except SupervisorClosedError:
            await run_storage(
                task_rows.end_task, task_id, self.worker_id, Status.INTERRUPTED, error=INTERRUPTED_ERROR
            )
            raise ToolError("the server is shutting down; start the task again in a moment") from None
        finally:
            if self.running.get(task_id) is None:  # not started: a row left running is swept
                self.running.pop(task_id, None)
        log.info("background task %s started in %s", task_id, context.dialog_id)
        return task_id

    # --- running ----------------------------------------------------------------------------------
    async def _run(self, started: task_rows.StartedTask, request: TaskRequest) -> None:
        limits = request.limits
        loop: AgentLoop | None = None
        try:
            scope = CallScope("task", started.dialog_id, started.id, started.owner_id, started.channel)
            with call_scope(scope):
                provider = turn_provider(preset_for(started.model).name, self.provider_for)
                tools = self.tools.subset(request.tools).bind(
                    ToolContext(started.dialog_id, started.channel, started.chat_id, turn_id=started.id)
                )
                config = settings.PICOBOT

                def within_limits() -> bool:
                    used = loop.result.usage.input_tokens + loop.result.usage.output_tokens
                    return loop.result.iterations < limits.max_iterations and used < limits.max_tokens

                loop = AgentLoop(
                    provider,
                    tools,
                    lambda event: None,  # no sink: a task's progress is not a turn's (seed 000 §9)
                    max_iterations=limits.max_iterations + 1,  # within_limits ends it first
                    tool_timeout=config.tool_timeout,
                    is_current=within_limits,
                    max_calls_per_response=config.max_tool_calls_per_response,
                    max_output_chars=config.max_turn_output_chars,
                )
                messages = [Message.system(SUB_AGENT_PROMPT), Message.user(request.prompt)]
                async with asyncio.timeout(limits.max_seconds):
                    ending = self._judge(await loop.run(messages), limits)
        except TimeoutError:
            ending = _Ending(
                Status.FAILED,
                _partial(loop),
                f"ran past its time limit of {limits.max_seconds:g} s",
            )
        except asyncio.CancelledError:
            reason = self._reasons.get(started.id, Status.INTERRUPTED)
            status, error = _STOP_ENDINGS.get(reason, (reason, INTERRUPTED_ERROR))
            try:
                if reason != GONE:
                    # Shielded: a second stop (or the shutdown) must not cut the end and its notice.
                    await asyncio.shield(self._end(started, _Ending(status, _partial(loop), error), loop))
            finally:
                self.running.pop(started.id, None)
                self._reasons.pop(started.id, None)
            raise
        except ToolFatalError as exc:
            ending = _Ending(Status.FAILED, _partial(loop), f"a tool could not go on: {exc}")
        except Exception:
            ref = new_ref()
            log.exception("background task %s crashed (ref %s)", started.id, ref)
            ending = _Ending(Status.FAILED, _partial(loop), f"internal error (ref {ref})")
        try:
            await self._end(started, ending, loop)
        finally:
            self.running.pop(started.id, None)
            self._reasons.pop(started.id, None)

    @staticmethod
    def _judge(result: AgentResult, limits: TaskLimits) -> _Ending:
        """How a finished loop ends the task."""
        partial = result.final_text
        if result.error is not None:
            return _Ending(Status.FAILED, partial, provider_failure_text(result.error))
        if result.stale:
            used = result.usage.input_tokens + result.usage.output_tokens
            if used >= limits.max_tokens:
                return _Ending(
                    Status.FAILED, partial, f"used {used} tokens, over its limit of {limits.max_tokens}"
                )
            return _Ending(
                Status.FAILED,
                partial,
                f"reached its limit of {limits.max_iterations} model requests before finishing",
            )
        return _Ending(Status.COMPLETED, result.final_text)

    async def _end(self, started: task_rows.StartedTask, ending: _Ending, loop: AgentLoop | None) -> None:
        """Write the end (once), then wake the dialog for its notification or tell the chat.

        The task's own usage rows are written first (bounded by ``USAGE_FLUSH_SECONDS``): the
        budget check that decides whether its notification is queued must count them.
        """
        usage = loop.result.usage if loop is not None else None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(USAGE_FLUSH_SECONDS):
                await usage_writer.flush()
        ended = await run_storage(
            task_rows.end_task,
            started.id,
            self.worker_id,
            ending.status,
            result=cut_result(ending.result, settings.PICOBOT.task_result_max_chars),
            error=ending.error,
            iterations=loop.result.iterations if loop is not None else 0,
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
        )
        if ended is None:
            log.info("background task %s was already ended elsewhere", started.id)
            return
        error = ended.error or ending.error
        log.info("background task %s %s%s", started.id, ending.status, f": {error}" if error else "")
        await announce_end(ended)

    # --- stopping -----------------------------------------------------------------------------
    def stop(self, task_id: str, reason: str = Status.CANCELLED) -> bool:
        """Cancel the task ``task_id`` if this worker runs it; it ends ``reason`` (a status, or
        :data:`DELETED` or :data:`GONE`). False if not here."""
        task = self.running.get(task_id)
        if task is None or task.done():
            return False
        if task_id in self._reasons:  # already stopping: cancelling again would cut its end short
            return True
        self._reasons[task_id] = reason
        task.cancel()
        return True

    async def shutdown(self, timeout: float = SHUTDOWN_GRACE_SECONDS) -> None:
        """Refuse new tasks, end the running ones ``interrupted`` (with their notices) and await
        them, bounded by ``timeout`` seconds."""
        self.closing = True
        tasks = [task for task in self.running.values() if task is not None and not task.done()]
        for task_id in list(self.running):
            self.stop(task_id, Status.INTERRUPTED)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    # --- heartbeat and sweep ----------------------------------------------------------------------
    async def run_heartbeat(self) -> None:
        """Every ``heartbeat_seconds``: :meth:`beat`, then :meth:`sweep` (never dies on an error)."""
        while True:
            try:
                await self.beat()
                await self.sweep()
            except Exception:
                log.exception("background task heartbeat failed")
            await asyncio.sleep(self.heartbeat_seconds)

    async def beat(self) -> None:
        """Stamp this worker's running tasks; cancel those a user asked to stop (whichever process
        took the request), those whose dialog was deleted, and those someone else ended."""
        ids = [task_id for task_id, task in self.running.items() if task is not None]
        states = await run_storage(task_rows.beat_tasks, self.worker_id, ids)
        for task_id, state in states.items():
            if state["status"] != Status.RUNNING:
                self.stop(task_id, GONE)  # its end is written already
            elif state["dialog_deleted"]:
                self.stop(task_id, DELETED)
            elif state["stop_requested"]:
                self.stop(task_id, Status.CANCELLED)

    async def sweep(self) -> None:
        """End ``interrupted`` the running tasks whose process is gone (see the module docstring)."""
        now = time.monotonic()
        seen: dict[str, tuple[tuple[str, int | None], float]] = {}
        rows = await run_storage(task_rows.running_task_owners, self.worker_id, now_ms() - self.stale_ms)
        for task_id, owner, heartbeat_at in rows:
            if owner == self.worker_id:
                if task_id not in self.running:  # this worker's previous incarnation ran it
                    await self._interrupt(task_id, owner, None)
                continue
            observed = (owner, heartbeat_at)
            before = self._lapsed.get(task_id)
            seen[task_id] = before if before is not None and before[0] == observed else (observed, now)
            if now - seen[task_id][1] >= self.confirm_seconds:
                await self._interrupt(task_id, owner, heartbeat_at)
                seen.pop(task_id, None)
        self._lapsed = seen

    async def _interrupt(self, task_id: str, owner: str, heartbeat_at: int | None) -> None:
        ended = await run_storage(
            task_rows.end_task,
            task_id,
            owner,
            Status.INTERRUPTED,
            error=INTERRUPTED_ERROR,
            heartbeat_at=heartbeat_at,
        )
        if ended is not None:
            log.warning("background task %s of %s ended interrupted: its process is gone", task_id, owner)
            await announce_end(ended)


def _partial(loop: AgentLoop | None) -> str:
    return loop.result.final_text if loop is not None else ""


async def announce_end(ended: task_rows.EndedTask) -> None:
    """After an end was written: wake a worker for its notification, or tell the chat its notice
    (kept on the row until a client received it: ``notify.publish_kept_notice``). Best effort."""
    try:
        if ended.inbox_id:
            await wake_dialog(ended.dialog_id)
        elif ended.notice:
            await notify.publish_kept_notice(
                ended.channel,
                ended.chat_id,
                ended.notice_level,
                ended.notice,
                session_id=ended.dialog_id,
                notice_id=task_notice_id(ended.id),
            )
    except Exception:
        log.warning("could not announce the end of background task %s", ended.id, exc_info=True)
