"""The agent worker: the ``picobot.agent`` channel consumer and the dialog executors it owns.

``AgentWorkerConsumer`` receives layer messages (``agent_channel``) and only routes them (a
handler that awaited a turn would block every dialog, DESIGN §2). ``AgentWorker`` owns the
per-dialog executor tasks, the lease keeper (a thread: ``lease_keeper``) and the inbox scan that
finds work whose wake-up message was lost or that a dead worker left behind. Its executors see
it only through the ``TurnContext`` it hands them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable

from channels.layers import get_channel_layer
from django.conf import settings

from conversations import storage
from conversations.runtime import platforms
from conversations.runtime.agent_channel import WORKERS_GROUP
from conversations.runtime.background_tasks import BackgroundTaskRunner
from conversations.runtime.checkpoints import CheckpointSource, TurnCheckpointer
from conversations.runtime.executor import DialogExecutor
from conversations.runtime.lease_keeper import LeaseKeeper
from conversations.runtime.provider import get_provider, preset_for
from conversations.runtime.scheduler import ScheduleRunner
from conversations.runtime.session_turns import claim_and_begin, known_state
from conversations.runtime.sessions import SessionManager, session_manager
from conversations.runtime.supervisor import TaskSupervisor
from conversations.runtime.titles import TitleService
from conversations.runtime.turn_context import SinkFactory, TurnContext
from conversations.runtime.turn_sinks import API_CHANNEL, open_turn_sink
from conversations.runtime.worker_consumer import (
    refresh_group_membership,
    replay_running_turns,
    run_consumer,
)
from conversations.storage.runner import run_storage
from conversations.tools import ToolRegistry, default_registry
from conversations.tools.mcp.manager import McpManager
from conversations.tools.mcp.sources import mcp_manager
from conversations.tools.tasks import spawn_task_tool
from conversations.usage.writer import flush_usage
from delivery.load import LoopLagGauge
from delivery.outbound import OutboundDispatcher
from delivery.platforms.cli_chat import CliChatSender
from picobot_site.metrics import instruments
from providers.base import LLMProvider
from providers.metering import MeteredProvider

log = logging.getLogger(__name__)

# Why a turn was cancelled, shown as the cancelled snapshot's error.
STOP_REASON = "stopped"
SHUTDOWN_REASON = "the server is shutting down"
LEASE_LOST_REASON = "another worker took over this dialog"


def default_worker_id(mode: str) -> str:
    """``PICOBOT_WORKER_ID`` or ``host:mode`` for serve (stable across restarts) / ``host:pid``."""
    configured = settings.PICOBOT.worker_id
    if configured:
        return configured
    host = socket.gethostname()
    return f"{host}:serve" if mode == "serve" else f"{host}:{os.getpid()}"


class AgentWorker:
    """Owns this process's dialog executors (one task per live dialog) and background loops.

    Args:
        worker_id: This worker's lease owner id.
        provider: The LLM provider (default: the configured one).
        tools: The tool registry (default: the built-in tools and ``spawn_task``, whose tasks
            run in ``self.tasks``; a given registry gets no ``spawn_task``: register
            ``spawn_task_tool(worker.tasks)`` on it to have one).
        sink_factory: Opens a turn's sink (seed 003 §10.1 ``open_turn``); default: the registered
            platform's (``runtime.platforms``), else the cli_chat sink. It may raise: the turn is then delivered final-only (seed 000 §5.1).
        outbound: The dispatcher for complete messages (the plain fallbacks); default: one with
            the cli_chat sender and every registered platform's. The worker closes it on ``stop()``.
        sessions: The runtime sessions of the live dialogs (seed 004 §6); default: the process's
            ``session_manager()``. ``start()`` runs its TTL cleanup every
            ``PICOBOT.session_cleanup_minutes`` minutes (seed 004 §6.4).
        mcp: The MCP tool servers (issue 18); default: those of ``PICOBOT_CONFIG`` and the admin
            (``tools.mcp.sources``), their tools in ``tools``. Started and stopped with the worker.
    """

    def __init__(
        self,
        worker_id: str,
        *,
        provider: LLMProvider | None = None,
        tools: ToolRegistry | None = None,
        sink_factory: SinkFactory | None = None,
        outbound: OutboundDispatcher | None = None,
        sessions: SessionManager | None = None,
        mcp: McpManager | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.provider = provider or get_provider()
        self._given_provider = provider
        self._metered: dict[str, LLMProvider] = {}
        # Background LLM work of this worker (titles, seed 000 §12; tasks, issue 18): reaped by stop().
        self.supervisor = TaskSupervisor("agent-worker")
        self.tasks = BackgroundTaskRunner(worker_id, self.provider_for, self.supervisor)
        """Background tasks started by ``spawn_task`` in this worker's turns (issue 18)."""
        if tools is None:
            tools = default_registry()
            if settings.PICOBOT.task_max_running > 0:
                tools.register(spawn_task_tool(self.tasks))
        self.tools = self.tasks.tools = tools
        self.mcp = mcp if mcp is not None else mcp_manager(self.tools, worker_id)
        self.open_sink: SinkFactory = sink_factory or open_turn_sink
        self.outbound = outbound or OutboundDispatcher(
            {
                "cli_chat": CliChatSender(get_channel_layer()),
                API_CHANNEL: CliChatSender(get_channel_layer()),
                **{adapter.channel: adapter.sender for adapter in platforms.adapters()},
            }
        )
        self.executors: dict[str, DialogExecutor] = {}
        self.sessions = sessions if sessions is not None else session_manager()
        # Titles on the default preset, metered like every call (usage rows: issue 17).
        self.titles = TitleService.from_settings(self.provider_for(""), self.supervisor)
        self.consumer_ready = asyncio.Event()
        self.consumer_channel: str | None = None
        self._tasks: set[asyncio.Task] = set()
        self._loops: list[asyncio.Task] = []
        self.stopped = asyncio.Event()
        """Set when ``stop()`` begins (executors cut their waits short)."""
        self.load = LoopLagGauge(on_sample=instruments.observe_loop_lag)
        """This process's event-loop lag: live snapshots stretch with it (``delivery.load``)."""
        self.lapsed_leases: dict[str, tuple[storage.Takeover, float]] = {}
        """Other workers' lapsed leases the scan saw: dialog id → (observed, first seen, monotonic)."""
        self.takeover_confirm_seconds = 2 * settings.PICOBOT.lease_renew_seconds
        self.lease_keeper = LeaseKeeper(
            worker_id,
            lease_seconds=settings.PICOBOT.lease_seconds,
            renew_seconds=settings.PICOBOT.lease_renew_seconds,
            held=self.held_leases,
            on_lost=self.lease_lost,
        )
        self.checkpointer = TurnCheckpointer(
            worker_id, self.running_turns, settings.PICOBOT.turn_checkpoint_seconds
        )
        """Saves what running turns showed, for a takeover after this process dies (0 s: off)."""
        self.scheduler = ScheduleRunner(worker_id)
        """Fires due scheduled prompts every ``PICOBOT_SCHEDULE_POLL_SECONDS`` (0 s: off)."""
        self.turn_context = TurnContext(
            worker_id=worker_id,
            provider=self.provider,
            provider_for=self.provider_for,
            tools=self.tools,
            sessions=self.sessions,
            lease_keeper=self.lease_keeper,
            open_sink=self.open_sink,
            outbound=self.outbound,
            pace=self.load.pace,
            schedule_title=self.titles.schedule,
            stopped=self.stopped,
        )
        """What the worker's executors see of it."""

    def provider_for(self, preset: str, *, before_fallback: bool = False) -> LLMProvider:
        """The provider of model preset ``preset`` ("" = the default): the configured one, or the
        provider this worker was given (tests), metered under the preset's name.
        ``before_fallback``: see ``runtime.provider.get_provider``."""
        if self._given_provider is None:
            return get_provider(preset, before_fallback=before_fallback)
        name = preset_for(preset).name
        metered = self._metered.get(name)
        if metered is None:
            metered = self._metered[name] = MeteredProvider(self._given_provider, name)
        return metered

    # --- lifecycle ----------------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        """True once ``stop()`` began: executors start no new turns."""
        return self.stopped.is_set()

    async def start(self) -> None:
        """Start the layer consumer, the lease keeper thread and the inbox scan; scan once now.
        The MCP servers start connecting (a server that is down never delays the start)."""
        await self.mcp.start()
        self._loops.append(asyncio.ensure_future(run_consumer(self)))
        self.lease_keeper.start()
        self.load.start()
        self._loops.append(asyncio.ensure_future(self._scan_loop()))
        self._loops.append(asyncio.ensure_future(refresh_group_membership(self)))
        self._loops.append(asyncio.ensure_future(self.tasks.run_heartbeat()))
        if self.checkpointer.period > 0:
            self._loops.append(asyncio.ensure_future(self.checkpointer.run()))
        if self.scheduler.period > 0:
            self._loops.append(asyncio.ensure_future(self.scheduler.run()))
        cleanup_seconds = settings.PICOBOT.session_cleanup_minutes * 60
        if cleanup_seconds > 0:  # evicts idle runtime sessions; never dies on an error (seed 004 §6.4)
            self._loops.append(asyncio.ensure_future(self.sessions.run_cleanup(cleanup_seconds)))
        await asyncio.wait_for(self.consumer_ready.wait(), timeout=10)
        for adapter in platforms.adapters():  # their receivers and recovery loops (runtime.platforms)
            try:
                await adapter.start()
            except Exception:
                log.exception("platform %s did not start; its chats get no answers", adapter.channel)

    async def stop(self, timeout: float = 10.0) -> None:
        """Cancel running turns and loops and wait for them (bounded by ``timeout`` s)."""
        self.stopped.set()
        for executor in list(self.executors.values()):
            executor.cancel_turn(SHUTDOWN_REASON)
        # Background tasks end interrupted, with their notices, while the layer still works.
        await self.tasks.shutdown(timeout=min(timeout, 5.0))
        tasks = [*self._loops, *self._tasks]
        for task in self._loops:
            task.cancel()
        if self.consumer_channel:  # stop receiving broadcasts meant for live workers
            with contextlib.suppress(Exception):
                await get_channel_layer().group_discard(WORKERS_GROUP, self.consumer_channel)
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:  # cancelled means cancelled *and awaited*: nothing runs on after stop()
                await asyncio.wait(pending, timeout=2)
        await self.lease_keeper.stop()  # after the executors: their last commits kept the leases
        await self.mcp.stop(timeout=min(timeout, 5.0))  # after the turns that called their tools
        await self.load.stop()
        # Titles after the executors (a last commit may have scheduled one): cancelled, not awaited long.
        await self.supervisor.close(timeout=min(timeout, 2.0))
        await flush_usage(timeout=min(timeout, 5.0))  # after every provider call of turns and titles
        # After the executors: their last fallbacks are already queued and get a short grace.
        await self.outbound.close(timeout=min(timeout, 2.0))
        for adapter in platforms.adapters():
            try:
                await adapter.stop(timeout=min(timeout, 5.0))
            except Exception:
                log.exception("platform %s did not stop cleanly", adapter.channel)

    def spawn(self, coro: Awaitable) -> asyncio.Task:
        """Run a supervised background task owned by this worker."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("agent worker task failed", exc_info=task.exception())

    # --- dialogs ------------------------------------------------------------------------------
    def wake(self, dialog_id: str, *, takeover: storage.Takeover | None = None) -> None:
        """Make sure the dialog's queued input gets run (idempotent).

        ``takeover``: another worker's lapsed lease as the scan observed it unchanged for a
        while (``scan_once``); without it only a free lease or our own is claimed.
        """
        if not dialog_id or self.stopping:
            return
        executor = self.executors.get(dialog_id)
        if executor is not None:
            executor.poke()
            return
        self.executors[dialog_id] = placeholder = DialogExecutor(self.turn_context, dialog_id, epoch=0)
        self.spawn(self._run_dialog(dialog_id, placeholder, takeover))

    async def _run_dialog(
        self, dialog_id: str, executor: DialogExecutor, takeover: storage.Takeover | None = None
    ) -> None:
        lease_ms = int(settings.PICOBOT.lease_seconds * 1000)
        try:
            claim, first = await run_storage(
                claim_and_begin,
                dialog_id,
                self.worker_id,
                lease_ms,
                takeover,
                known_state(self.sessions, dialog_id),
                executor.prefetch,
                lambda: not self.stopping,
            )
            if claim is None:
                return  # another live worker owns it
            if takeover is not None:
                instruments.record_lease_takeover()
            executor.epoch = claim.epoch
            executor.confirm_lease()
            await executor.run(claim.interrupted, first=first)
        except storage.LeaseLostError:
            log.warning("lease of %s lost; leaving it to its new owner", dialog_id)
        finally:
            if self.executors.get(dialog_id) is executor:
                del self.executors[dialog_id]
        if executor.epoch:
            await run_storage(storage.release_lease, dialog_id, self.worker_id, executor.epoch)

    def stop_task(self, task_id: str) -> bool:
        """Cancel background task ``task_id`` if this worker runs it (it ends ``cancelled``)."""
        return self.tasks.stop(task_id)

    def stop_turn(
        self, dialog_id: str, turn_id: str | None = None, *, setting_up: bool = False
    ) -> bool | None:
        """Cancel the dialog's running turn here; False when this worker runs none.

        With ``turn_id``, only that turn: False when another one runs; True (again) while it is
        being cancelled. None when the executor is between turns, where ``turn_id`` may be the turn
        being set up or one that just ended — only its inbox row tells (``dialog_stop`` reads it,
        then calls again with ``setting_up=True`` to cancel the turn the moment its loop starts).
        """
        executor = self.executors.get(dialog_id)
        if executor is None:
            return False
        if turn_id is None:
            return executor.cancel_turn(STOP_REASON)
        running = executor.running
        if running is None:
            return executor.cancel_turn(STOP_REASON) if setting_up else None
        if str(running.turn_id) != turn_id:
            return False
        if executor.cancel_turn(STOP_REASON):
            return True
        return running.task is not None and running.task.cancelled()  # already cancelled, now settling

    async def replay_running(self, message: dict) -> None:
        """Send the latest snapshots of a chat's running turns to one new connection."""
        await replay_running_turns(list(self.executors.values()), message)

    # --- background loops ---------------------------------------------------------------------
    async def scan_once(self) -> None:
        """Wake every dialog with queued or orphaned input this worker may take.

        Free leases and our own are claimed at once. Another worker's lapsed lease only when
        this scan saw the very same ``(owner, expires_at)`` at least ``takeover_confirm_seconds``
        ago: its owner has stopped renewing, it is not merely late (DESIGN §2, slow is not dead).
        """
        now = time.monotonic()
        lapsed: dict[str, tuple[storage.Takeover, float]] = {}
        for dialog_id, owner, expires_at in await run_storage(storage.dialogs_needing_work, self.worker_id):
            if owner is None or owner == self.worker_id:
                self.wake(dialog_id)
                continue
            observed = (owner, expires_at)
            seen = self.lapsed_leases.get(dialog_id)
            lapsed[dialog_id] = seen if seen is not None and seen[0] == observed else (observed, now)
            if now - lapsed[dialog_id][1] >= self.takeover_confirm_seconds:
                self.wake(dialog_id, takeover=observed)
        self.lapsed_leases = lapsed

    async def _scan_loop(self) -> None:
        interval = settings.PICOBOT.inbox_scan_seconds
        while True:
            try:
                await self.scan_once()
            except Exception:
                log.exception("inbox scan failed")
            await asyncio.sleep(interval)

    # --- leases (renewed by ``self.lease_keeper`` on its own thread) ------------------------------
    def held_leases(self) -> list[tuple[str, int]]:
        """``(dialog_id, epoch)`` of every dialog this worker runs (called from the keeper thread:
        the ``list()`` copy is atomic under the GIL)."""
        return [
            (dialog_id, executor.epoch)
            for dialog_id, executor in list(self.executors.items())
            if executor.epoch
        ]

    def running_turns(self) -> list[CheckpointSource]:
        """The running turns whose lease is confirmed, for the checkpointer (on the loop)."""
        turns = []
        for dialog_id, executor in self.executors.items():
            running = executor.running
            if running is None or not running.inbox_id or running.controller.is_terminal:
                continue
            if executor.epoch and executor.lease_confirmed():
                turns.append(
                    CheckpointSource(
                        dialog_id,
                        executor.epoch,
                        running.inbox_id,
                        running.turn_id,
                        running.controller.snapshot,
                    )
                )
        return turns

    def lease_lost(self, dialog_id: str, epoch: int) -> None:
        """The database says another worker claimed the dialog (or a delete bumped its epoch):
        the executor holding ``epoch`` stops its turn silently (seed 003 §8.3). A lease that only
        lapsed is renewed by the keeper and never ends up here."""
        executor = self.executors.get(dialog_id)
        if executor is None or executor.epoch != epoch or executor.lease_lost:
            return
        log.warning("lease of %s lost to another worker; stopping its turn", dialog_id)
        executor.lease_lost = True
        executor.cancel_turn(LEASE_LOST_REASON)
