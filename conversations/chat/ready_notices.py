"""Kept notices on a connection: what happened while nobody of the chat may have been connected
(DESIGN §3; issue 18).

Each is kept on its row until a client received it (``storage.notices``): turns a dead process
left ``interrupted``, missed or refused scheduled runs, background tasks that ended without a
turn. The live group broadcast carries ``kept_notice`` (layer meta): a connection that sends it
on marks it received (:func:`mark_received`). The broadcast is best effort (after a restart
usually nobody is connected yet), so every ``ready`` also sends what is still pending, then marks
it. Both paths carry the same notification ``id`` (and, for a turn, the same terminal revision),
and a connection sends each kept notice once (:class:`KeptNoticesSent`): a broadcast queued while
the connection was sending its pending notices is not sent again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from conversations import storage
from conversations.runtime.notify import dumps, interrupted_notice
from conversations.storage.runner import run_storage

log = logging.getLogger(__name__)


class KeptNoticesSent:
    """The kept notices one connection sent on, by ``("inbox", inbox_id)`` (an interrupted turn) or
    ``("id", notification id)``: each goes out once per connection, whichever path came first."""

    def __init__(self) -> None:
        self._keys: set[tuple[str, str]] = set()

    def first_time(self, kept: dict) -> bool:
        """True once per notice: record ``kept`` (the ``kept_notice`` meta shape) as sent."""
        key = ("inbox", str(kept["inbox_id"])) if kept.get("inbox_id") else ("id", str(kept.get("id")))
        if key in self._keys:
            return False
        self._keys.add(key)
        return True


OfferTerminal = Callable[[str, int, str], Awaitable[None]]
"""``(turn_id, revision, payload)``: send a terminal snapshot through the connection's credit window."""


async def send_pending_notices(
    channel: str,
    chat_id: str,
    offer_terminal: OfferTerminal,
    send_text: Callable[[str], Awaitable[None]],
    sent: KeptNoticesSent,
) -> None:
    """Send the chat's pending notices to one connection and mark them sent.

    An interrupted turn gets its terminal ``failed`` snapshot (through ``offer_terminal``, so a
    later broadcast copy is dropped) and its warning; an automation notice its ``notification``.
    Best effort: a failure leaves the rest pending for the next connection and never fails the
    connect.
    """
    try:
        turns = await run_storage(storage.pending_interrupted_notices, channel, chat_id)
        for item in turns:
            if not sent.first_time({"inbox_id": item["inbox_id"]}):
                continue
            notice = interrupted_notice(item)
            await offer_terminal(notice.turn_id, notice.revision, notice.payload)
            await send_text(notice.notification_text)
        if turns:
            await run_storage(storage.mark_notices_sent, [item["inbox_id"] for item in turns])
        automation = await run_storage(storage.pending_automation_notices, channel, chat_id)
        for item in automation:
            if not sent.first_time({"id": item["id"]}):
                continue
            frame = {k: item[k] for k in ("id", "level", "content", "session_id")}
            await send_text(dumps({"type": "notification", **frame}))
        if automation:
            await run_storage(storage.mark_automation_notices_sent, [item["id"] for item in automation])
    except Exception:
        log.exception("could not send the chat's pending notices; the next connection retries")


async def mark_received(kept: dict) -> None:
    """A connection sent a broadcast kept notice on to its client: mark it received.

    ``kept``: ``{"inbox_id": …}`` (an interrupted turn) or ``{"id": …}`` (a notification id of
    ``storage.notices``). Best effort: unmarked, it is sent once more on the next ``ready``.
    """
    try:
        if kept.get("inbox_id"):
            await run_storage(storage.mark_notices_sent, [kept["inbox_id"]])
        elif kept.get("id"):
            await run_storage(storage.mark_automation_notices_sent, [kept["id"]])
    except Exception:
        log.warning("could not mark a notice received; the next connection sends it again", exc_info=True)
