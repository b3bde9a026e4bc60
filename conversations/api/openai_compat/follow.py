"""Following one request's turn through the channel layer, and ending it when the client leaves
(issue 18; DESIGN §2: the path a WebSocket client takes, in ``serve`` as when scaled out).

:class:`TurnFollower` joins the chat's group *before* the message is accepted, so no snapshot of
its turn is missed, and reads what the worker publishes there: the turn's snapshots
(``turn.snapshot`` with the message's ``inbox_id``, ``delivery.platforms.cli_chat``) and its
``turn_committed`` (``chat.frame`` with ``committed_inbox_id``, ``runtime.notify``). Layer
messages may be dropped: how the turn ended is always read from storage (``request_turn``), on
the terminal snapshot, on the commit frame, and every ``POLL_SECONDS`` of silence.

:func:`abandon` ends a turn whose client disconnected: a queued message is withdrawn; a started
turn is stopped as ``/stop`` does (``request_stop``); a one-request dialog is retired once its
turn ended. It runs as a task of its own, bounded by ``ABANDON_SECONDS``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from channels.layers import get_channel_layer

from conversations import storage
from conversations.models import InboxMessage
from conversations.runtime.agent_channel import request_stop
from conversations.storage.runner import run_storage
from delivery.groups import chat_group
from delivery.platforms.cli_chat import FRAME_MESSAGE_TYPE, SNAPSHOT_MESSAGE_TYPE

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
"""Silence after which storage is asked how the turn stands (a dropped commit frame costs this)."""

ABANDON_SECONDS = 30.0
"""How long :func:`abandon` waits for a stopped turn to end before it leaves it to the worker."""

ENDED = (InboxMessage.Status.DONE, InboxMessage.Status.INTERRUPTED)

_abandoning: set[asyncio.Task] = set()


@dataclass(frozen=True)
class TurnUpdate:
    """One step of a followed turn: a new ``snapshot`` (a PROTOCOL §1 turn object), the turn's
    ``ended`` state (``storage.request_turn``: its last step), or neither (a quiet tick)."""

    snapshot: dict | None = None
    ended: dict | None = None


class TurnFollower:
    """The layer side of one request: joined to the chat's group until :meth:`close`.

    Args:
        channel, chat_id: the chat of the request's dialog.
    """

    def __init__(self, channel: str, chat_id: str) -> None:
        self.group = chat_group(channel, chat_id)
        self.name = ""
        self._layer = get_channel_layer()

    async def open(self) -> None:
        """Join the chat's group on a fresh channel of this process."""
        self.name = await self._layer.new_channel("picobot.openai.")
        await self._layer.group_add(self.group, self.name)

    async def close(self) -> None:
        """Leave the group (idempotent; best effort: a leftover membership expires)."""
        name, self.name = self.name, ""
        if name:
            try:
                await self._layer.group_discard(self.group, name)
            except Exception:
                log.warning("could not leave the group %s", self.group, exc_info=True)

    async def follow(self, inbox_id: str, *, deadline: float) -> AsyncIterator[TurnUpdate]:
        """The turn of inbox row ``inbox_id``, step by step, until it ended (the last update
        carries ``ended``). A quiet tick is yielded at least every ``POLL_SECONDS``.

        Raises:
            TimeoutError: the turn had not ended by ``deadline`` (the loop's clock).
        """
        loop = asyncio.get_running_loop()
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"the turn of message {inbox_id} did not end in time")
            try:
                message = await asyncio.wait_for(self._layer.receive(self.name), min(POLL_SECONDS, remaining))
            except TimeoutError:
                message = None
            check = message is None
            if message is not None and message.get("inbox_id") == inbox_id:
                if message.get("type") == SNAPSHOT_MESSAGE_TYPE:
                    yield TurnUpdate(snapshot=json.loads(message["json"]))
                    check = bool(message.get("terminal"))  # published after the commit
            elif message is not None and message.get("type") == FRAME_MESSAGE_TYPE:
                check = message.get("committed_inbox_id") == inbox_id
            if check:
                state = await run_storage(storage.request_turn, inbox_id)
                if state is None or state["status"] in ENDED:
                    yield TurnUpdate(ended=state or {"status": InboxMessage.Status.DONE, "rows": []})
                    return
                if message is None:
                    yield TurnUpdate()


def abandon(dialog_id: str, inbox_id: str, *, retire: bool) -> None:
    """End the turn of ``inbox_id`` whose client left (nothing to do when it has ended), then
    retire its one-request dialog when ``retire``: in a task of its own (see the module)."""
    task = asyncio.ensure_future(_abandon(dialog_id, inbox_id, retire=retire))
    _abandoning.add(task)
    task.add_done_callback(_abandoning.discard)


async def _abandon(dialog_id: str, inbox_id: str, *, retire: bool) -> None:
    try:
        async with asyncio.timeout(ABANDON_SECONDS):
            stopped = False
            while True:
                if await run_storage(storage.withdraw_queued, inbox_id):
                    log.info("message %s withdrawn: its client disconnected", inbox_id)
                    break
                state = await run_storage(storage.request_turn, inbox_id)
                if state is None or state["status"] in ENDED:
                    break
                if not stopped and state["turn_id"]:
                    await run_storage(storage.note_stop_requested, dialog_id, state["turn_id"])
                    await request_stop(dialog_id, turn_id=state["turn_id"])
                    log.info("turn %s stopped: its client disconnected", state["turn_id"])
                    stopped = True
                await asyncio.sleep(POLL_SECONDS / 4)
            if retire:
                await run_storage(storage.retire_request_dialog, dialog_id)
    except TimeoutError:
        log.warning("the abandoned turn of message %s did not end within %.0f s", inbox_id, ABANDON_SECONDS)
    except Exception:
        log.exception("could not end the abandoned turn of message %s", inbox_id)


async def drain_abandoned(timeout: float = ABANDON_SECONDS) -> None:
    """Wait for the running :func:`abandon` tasks (tests; shutdown)."""
    if _abandoning:
        await asyncio.wait(set(_abandoning), timeout=timeout)
