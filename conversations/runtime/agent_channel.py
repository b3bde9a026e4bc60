"""The agent workers' channel-layer addresses, and the messages the rest of the process sends them.

Layer messages only *wake* a worker; duplicates and losses are harmless: the workers' inbox scan
finds queued input anyway (DESIGN §2). Message types:

- ``dialog.input`` ``{dialog_id}`` on ``picobot.agent``: the dialog has queued input.
- ``dialog.stop`` ``{dialog_id, turn_id?, reply_channel?}`` on the workers group: cancel its running
  turn — only the turn ``turn_id`` when given (a repeated stop never cancels the next turn); the
  owner answers ``stop.ack`` ``{dialog_id, turn_id}`` on ``reply_channel``.
- ``task.stop`` ``{task_id}`` on the workers group: cancel that background task (only the worker
  running it has it; a lost message is made up by the task's heartbeat, which reads the stop
  request from its row).
- ``turns.replay`` ``{channel, chat_id, reply_channel}`` on the workers group: send the latest
  snapshot of the chat's running turns to a newly connected client.
"""

from __future__ import annotations

import logging

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

AGENT_CHANNEL = "picobot.agent"
"""Any one worker receives what is sent here (``dialog.input``)."""

WORKERS_GROUP = "picobot.workers"
"""Every live worker receives what is sent here (``dialog.stop``, ``turns.replay``)."""


async def wake_dialog(dialog_id: str) -> None:
    """Tell some agent worker that ``dialog_id`` has queued input (best effort)."""
    await get_channel_layer().send(AGENT_CHANNEL, {"type": "dialog.input", "dialog_id": dialog_id})


async def request_stop(
    dialog_id: str, *, turn_id: str | None = None, reply_channel: str | None = None
) -> None:
    """Ask every agent worker to cancel ``dialog_id``'s running turn (only its owner has one).

    With ``turn_id`` (the turn that was running when the stop was asked, ``storage.running_inbox``)
    only that turn is cancelled: when it has ended meanwhile, nothing is — a repeated stop never
    cancels the next queued turn. Without it, whatever turn runs (deleting a dialog).
    With ``reply_channel``, the worker that cancels it answers there with ``stop.ack``
    ``{dialog_id, turn_id}`` (a turn that no live worker runs gets no answer: see
    ``ChatConsumer.stop_turn``).
    """
    message = {"type": "dialog.stop", "dialog_id": dialog_id}
    if turn_id:
        message["turn_id"] = turn_id
    if reply_channel:
        message["reply_channel"] = reply_channel
    await get_channel_layer().group_send(WORKERS_GROUP, message)


async def request_task_stop(task_id: str) -> None:
    """Ask every agent worker to cancel background task ``task_id`` (only its owner runs it).

    Best effort: callers mark the stop on the task's row first (``storage.request_task_stop``),
    and the owner's heartbeat reads it there when the layer is down or loses the message.
    """
    try:
        await get_channel_layer().group_send(WORKERS_GROUP, {"type": "task.stop", "task_id": task_id})
    except Exception:
        log.warning(
            "could not ask the workers to stop task %s; its heartbeat reads the stop", task_id, exc_info=True
        )
