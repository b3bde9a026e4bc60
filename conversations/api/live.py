"""What the REST API asks the live system through the channel layer (DESIGN §2: one path).

A running turn's snapshot lives in the memory of the agent worker that runs it — in this process
under ``serve``, in some ``runagent`` process when scaled out. The API asks for it the way a new
WebSocket connection does: ``turns.replay`` to the workers group, answered on a reply channel of
its own; a stop is ``dialog.stop`` with a reply channel, acknowledged with ``stop.ack``. No
in-process shortcut: the embedded and the scale-out mode take the same path, and a worker that
died (or a layer that dropped the message) only costs the bounded wait, after which the caller
degrades (a placeholder snapshot; "not acknowledged").
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Callable

from channels.layers import get_channel_layer

from conversations.chat.frames import placeholder_snapshot
from conversations.runtime.agent_channel import WORKERS_GROUP, request_stop

log = logging.getLogger(__name__)

SNAPSHOT_WAIT_SECONDS = 1.0
"""How long ``GET …/turn`` waits for the owning worker's snapshot before answering a placeholder."""

LAYER_PING_SECONDS = 2.0
"""How long ``GET /api/ready`` waits for its own message to come back through the layer."""


async def _receive_until(channel: str, accept: Callable[[dict], bool], timeout: float) -> dict | None:
    """The first message on ``channel`` that ``accept``s within ``timeout`` seconds, or None."""
    layer = get_channel_layer()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (remaining := deadline - loop.time()) > 0:
        try:
            message = await asyncio.wait_for(layer.receive(channel), remaining)
        except TimeoutError:
            return None
        if accept(message):
            return message
    return None


async def layer_ping(timeout: float = LAYER_PING_SECONDS) -> bool:
    """Send a message to a fresh channel of this process and receive it back (``/api/ready``)."""
    layer = get_channel_layer()
    channel = await layer.new_channel("picobot.api.ready")
    nonce = secrets.token_hex(8)
    await layer.send(channel, {"type": "api.ping", "nonce": nonce})
    return await _receive_until(channel, lambda m: m.get("nonce") == nonce, timeout) is not None


async def turn_snapshot(turn: dict, channel: str, chat_id: str, timeout: float | None = None) -> dict:
    """The latest snapshot of a running turn, as its worker presents it to WebSocket clients.

    ``turn`` is a ``storage.running_inbox`` item (``turn_id``, ``session_id``, ``message_id``).
    When no worker answers within ``timeout`` (default ``SNAPSHOT_WAIT_SECONDS``), the placeholder
    a WebSocket ``ready`` carries for it: revision 0, phase ``queued``.
    """
    timeout = SNAPSHOT_WAIT_SECONDS if timeout is None else timeout
    layer = get_channel_layer()
    reply = await layer.new_channel("picobot.api.turn")
    await layer.group_send(
        WORKERS_GROUP,
        {"type": "turns.replay", "channel": channel, "chat_id": chat_id, "reply_channel": reply},
    )
    message = await _receive_until(
        reply, lambda m: m.get("type") == "turn.snapshot" and m.get("turn_id") == turn["turn_id"], timeout
    )
    if message is None:
        log.info(
            "no worker sent the snapshot of turn %s within %.1f s: placeholder", turn["turn_id"], timeout
        )
        return placeholder_snapshot(turn)
    return json.loads(message["json"])


async def stop_turn(session_id: str, turn_id: str, timeout: float) -> bool:
    """Ask the workers to cancel the dialog's turn ``turn_id`` (the one running when asked: a
    repeated stop never cancels the next turn); True when its owner acknowledged it within
    ``timeout`` seconds (False: it ended meanwhile, or no live worker runs it — it is reported
    interrupted once its dialog is taken over)."""
    layer = get_channel_layer()
    reply = await layer.new_channel("picobot.api.stop")
    await request_stop(session_id, turn_id=turn_id, reply_channel=reply)
    acked = await _receive_until(
        reply,
        lambda m: (
            m.get("type") == "stop.ack" and m.get("dialog_id") == session_id and m.get("turn_id") == turn_id
        ),
        timeout,
    )
    return acked is not None
