"""Fixtures of the scheduled-prompt tests: the gateway's (fast loops, fresh sessions), the Feishu
fake, a user's dialog with a schedule, and a worker whose scheduler ticks only when told to."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.models import Dialog, Schedule
from tests.conversations.feishu.conftest import feishu, feishu_server  # noqa: F401 - fixtures used here
from tests.conversations.gateway_fixtures import fast_picobot, fresh_runtime_sessions  # noqa: F401 - autouse here


@pytest.fixture(autouse=True)
def manual_scheduler(settings: object) -> None:
    """Workers' schedulers do not poll by themselves: tests call ``worker.scheduler.tick()``."""
    settings.PICOBOT = settings.PICOBOT.replace(schedule_poll_seconds=0)


@database_sync_to_async
def add_schedule(username: str = "alice", cron: str = "0 9 * * *", prompt: str = "Summarise the news", **kw):
    """A schedule on ``username``'s active cli_chat dialog; returns ``(item, dialog)``."""
    user, _ = get_or_create_user(username)
    dialog = storage.active_dialog(user, "cli_chat", str(user.pk))  # a cli_chat chat is its user
    return storage.create_schedule(dialog, cron, prompt, **kw), dialog


@database_sync_to_async
def runs_of(schedule_id: int) -> list[tuple[int, str, bool, str]]:
    """``(slot_at, status, missed, detail)`` of the schedule's run rows, by slot."""
    from conversations.models import ScheduleRun

    return list(
        ScheduleRun.objects.filter(schedule_id=schedule_id)
        .order_by("slot_at")
        .values_list("slot_at", "status", "missed", "detail")
    )


@database_sync_to_async
def schedule_row(schedule_id: int) -> Schedule:
    return Schedule.objects.get(pk=schedule_id)


def at(ms: int) -> Callable[[], int]:
    return lambda: ms


__all__ = ["Dialog", "add_schedule", "at", "runs_of", "schedule_row"]
