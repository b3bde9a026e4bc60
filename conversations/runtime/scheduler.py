"""The scheduler: every agent worker process polls for due scheduled prompts (issue 18).

``ScheduleRunner.tick`` fires due slots through ``storage.fire_due_schedules`` (each slot's run
row and inbox row commit together, so processes that race take each slot once), then wakes the
dialogs whose prompt was queued and tells chats about missed and refused runs
(``notify.publish_kept_notice``, which reaches external platforms such as Feishu too). Persist
first, then notify: a lost wake-up is found by the inbox scan; a notice nobody was connected for
stays on its run row and is sent on the chat's next ``ready`` (``storage.notices``). Once an
hour a tick also prunes run rows older than ``RUN_HISTORY_DAYS``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from django.conf import settings

from conversations import storage
from conversations.models import now_ms
from conversations.runtime import notify
from conversations.runtime.agent_channel import wake_dialog
from conversations.storage.runner import run_storage

log = logging.getLogger(__name__)

RUN_HISTORY_DAYS = 30
"""Run rows (the admin's history of each schedule) are kept this long, then pruned."""
PRUNE_EVERY_MS = 3_600_000


class ScheduleRunner:
    """Polls for due schedules every ``period`` s (``PICOBOT_SCHEDULE_POLL_SECONDS``).

    Args:
        worker_id: Recorded on the run rows this process creates.
        clock: Now in ms (tests move it).
    """

    def __init__(self, worker_id: str, *, clock: Callable[[], int] = now_ms) -> None:
        self.worker_id = worker_id
        self.clock = clock
        self.period = settings.PICOBOT.schedule_poll_seconds
        self._pruned_at: int | None = None

    async def tick(self) -> list[storage.FiredSlot]:
        """Fire what is due now, wake and notify; returns the slots this process handled."""
        fired = await run_storage(
            storage.fire_due_schedules,
            self.worker_id,
            self.clock(),
            int(settings.PICOBOT.schedule_grace_seconds * 1000),
            settings.PICOBOT.schedule_missed,
        )
        for slot in fired:
            if slot.notice and slot.channel:
                try:
                    await notify.publish_kept_notice(
                        slot.channel,
                        slot.chat_id,
                        slot.notice_level,
                        slot.notice,
                        session_id=slot.dialog_id,
                        notice_id=storage.schedule_notice_id(slot.schedule_id, slot.slot_at),
                    )
                except Exception:
                    log.warning("could not tell chat of schedule %s", slot.schedule_id, exc_info=True)
            if slot.status == "queued":
                try:
                    await wake_dialog(slot.dialog_id)
                except Exception:  # the inbox scan finds it
                    log.warning("could not wake dialog %s", slot.dialog_id, exc_info=True)
        await self._prune()
        return fired

    async def _prune(self) -> None:
        """At most once an hour: delete run rows older than ``RUN_HISTORY_DAYS``."""
        now = self.clock()
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY_MS:
            return
        self._pruned_at = now
        deleted = await run_storage(storage.prune_schedule_runs, now - RUN_HISTORY_DAYS * 86_400_000)
        if deleted:
            log.info("scheduled prompts: %d run rows older than %d days pruned", deleted, RUN_HISTORY_DAYS)

    async def run(self) -> None:
        """Tick every ``period`` s until cancelled; an error is logged and the next tick tries again."""
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduled prompts: poll failed")
            await asyncio.sleep(self.period)
