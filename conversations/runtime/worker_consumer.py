"""The agent worker's channel-layer consumer: routes each message to the worker, never awaits a turn.

Driven by ``AgentWorker._consumer_loop`` (``consumer_base.dispatch_channels``), not by Channels'
ASGI loop. The messages and their senders: ``agent_channel``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Protocol

from channels.consumer import AsyncConsumer

from conversations import storage
from conversations.runtime.agent_channel import WORKERS_GROUP
from conversations.runtime.consumer_base import LoopDispatch
from conversations.runtime.turn_sinks import split_session_id
from conversations.storage.runner import run_storage

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
