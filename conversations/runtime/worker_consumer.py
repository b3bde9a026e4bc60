"""The agent worker's channel-layer consumer: routes each message to the worker, never awaits a turn.

Driven by :func:`run_consumer` (``consumer_base.dispatch_channels``), not by Channels' ASGI loop.
The messages and their senders: ``agent_channel``. Also here: the worker's other layer chores
(:func:`refresh_group_membership`, :func:`replay_running_turns`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable
from typing import Any, Protocol

from channels.consumer import AsyncConsumer
from channels.layers import get_channel_layer
from django.conf import settings

from conversations import storage
from conversations.runtime.agent_channel import AGENT_CHANNEL, WORKERS_GROUP
from conversations.runtime.consumer_base import LoopDispatch, dispatch_channels
from conversations.runtime.turn_sinks import split_session_id
from conversations.storage.runner import run_storage
from delivery.presentation import PresentationPolicy, serialize_snapshot

log = logging.getLogger(__name__)

# A stop of a turn whose row is started while its executor has no running turn yet (setup):
# how often, and how far apart, the row and the executor are looked at again.
STOP_SETUP_POLLS = 10
STOP_SETUP_POLL_SECONDS = 0.1


class WorkerControl(Protocol):
    """What the consumer asks of its worker (``AgentWorker``)."""

    consumer_channel: str | None
    consumer_ready: asyncio.Event

    def wake(self, dialog_id: str) -> None: ...

    def stop_turn(
        self, dialog_id: str, turn_id: str | None = None, *, setting_up: bool = False
    ) -> bool | None: ...

    def stop_task(self, task_id: str) -> bool: ...

    def spawn(self, coro: Awaitable) -> asyncio.Task: ...

    async def replay_running(self, message: dict) -> None: ...


async def run_consumer(worker: WorkerControl) -> None:
    """Run the worker's layer consumer; if the layer fails (Redis restarts), log and start it again.

    The inbox scan keeps turns running meanwhile, but stop requests and replays travel only
    through the layer, so the consumer must not stay dead.
    """
    layer = get_channel_layer()
    delay = 0.5
    while True:
        consumer = AgentWorkerConsumer(worker=worker)
        consumer.channel_layer = layer
        try:
            consumer.channel_name = await layer.new_channel()
            await consumer.dispatch({"type": "worker.start"})  # joins the workers group (again)
            await dispatch_channels(layer, [AGENT_CHANNEL, consumer.channel_name], consumer.dispatch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("agent channel consumer failed; restarting in %.1f s", delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)


async def refresh_group_membership(worker: WorkerControl) -> None:
    """Re-join the workers group every ``PICOBOT_GROUP_REFRESH_SECONDS``: layers drop members
    after ``group_expiry``."""
    interval = settings.PICOBOT.group_refresh_seconds
    while True:
        await asyncio.sleep(interval)
        if worker.consumer_channel:
            try:
                await get_channel_layer().group_add(WORKERS_GROUP, worker.consumer_channel)
            except Exception:
                log.exception("could not refresh the workers group membership")


async def replay_running_turns(executors: Iterable[Any], message: dict) -> None:
    """Send the latest snapshot of each live running turn of ``message``'s chat (``channel``,
    ``chat_id``) to its ``reply_channel``; final-only turns are skipped (the chat sees their
    terminal snapshot alone). ``executors``: ``DialogExecutor``s."""
    reply = message.get("reply_channel")
    if not reply:
        return
    layer = get_channel_layer()
    policy = PresentationPolicy.websocket()
    for executor in executors:
        running = executor.running
        if (
            running is None
            or not running.live
            or running.channel != message.get("channel")
            or running.chat_id != message.get("chat_id")
        ):
            continue
        snapshot = running.controller.snapshot()
        try:
            await layer.send(
                reply,
                {
                    "type": "turn.snapshot",
                    "turn_id": snapshot.id,
                    "session_id": snapshot.session_id,
                    "revision": snapshot.revision,
                    "terminal": snapshot.is_terminal,
                    "json": serialize_snapshot(snapshot, policy),
                },
            )
        except Exception:  # the layer is down: the client shows the placeholder until the next snapshot
            log.warning("could not replay turn %s to a new connection", snapshot.id, exc_info=True)
            return


class AgentWorkerConsumer(LoopDispatch, AsyncConsumer):
    """Routes agent layer messages to the process's ``AgentWorker``; never awaits a turn."""

    def __init__(self, worker: WorkerControl) -> None:
        super().__init__()
        self.worker = worker

    async def worker_start(self, message: dict) -> None:
        """Synthetic first message: join the workers broadcast group."""
        await self.channel_layer.group_add(WORKERS_GROUP, self.channel_name)
        self.worker.consumer_channel = self.channel_name
        self.worker.consumer_ready.set()

    async def dialog_input(self, message: dict) -> None:
        self.worker.wake(str(message.get("dialog_id", "")))

    async def dialog_stop(self, message: dict) -> None:
        dialog_id = str(message.get("dialog_id", ""))
        turn_id = str(message["turn_id"]) if message.get("turn_id") else None
        reply = message.get("reply_channel")
        worker = self.worker

        async def acknowledge() -> None:
            if not reply:
                return
            try:
                await self.channel_layer.send(
                    reply, {"type": "stop.ack", "dialog_id": dialog_id, "turn_id": turn_id}
                )
            except Exception:
                # The layer is down: the asker's wait ends unacknowledged (ChatConsumer.stop_turn).
                log.warning("could not acknowledge the stop of %s", dialog_id, exc_info=True)

        stopped = worker.stop_turn(dialog_id, turn_id)
        if stopped is None:
            # This worker's executor is between turns: ``turn_id`` may be the turn being set up
            # (its row reads started, its loop does not exist yet) or one that just ended. Its
            # row decides, off the consumer's message loop (a handler only routes).
            async def stop_if_setting_up() -> None:
                channel, chat_id = split_session_id(dialog_id)
                for _ in range(STOP_SETUP_POLLS):
                    started = await run_storage(storage.running_inbox, channel, chat_id)
                    if not any(t["turn_id"] == turn_id and t["session_id"] == dialog_id for t in started):
                        return  # it ended: nothing to stop (never the next turn)
                    outcome = worker.stop_turn(dialog_id, turn_id)
                    if outcome is not None:
                        if outcome:
                            await acknowledge()
                        return
                    await asyncio.sleep(STOP_SETUP_POLL_SECONDS)
                # Still being set up: cancelled the moment its loop starts.
                if worker.stop_turn(dialog_id, turn_id, setting_up=True):
                    await acknowledge()

            worker.spawn(stop_if_setting_up())
        elif stopped:
            await acknowledge()

    async def task_stop(self, message: dict) -> None:
        self.worker.stop_task(str(message.get("task_id", "")))

    async def turns_replay(self, message: dict) -> None:
        self.worker.spawn(self.worker.replay_running(message))
