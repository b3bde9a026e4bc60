"""The per-user schedule limit holds when creates race (``PICOBOT_SCHEDULES_PER_USER``): each
create locks what the limit counts over before counting (PostgreSQL; SQLite serialises writers).
Run on PostgreSQL too by ``tests/services/test_storage_postgres.py``."""

from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.models import Dialog, Schedule

pytestmark = pytest.mark.django_db(transaction=True)
RACERS = 6


def race(dialogs: list[Dialog]) -> list[str]:
    """Each dialog's create at once (a barrier lines them up); what each one got."""
    barrier = threading.Barrier(len(dialogs))
    outcomes: list[str] = []

    def create(dialog: Dialog) -> None:
        try:
            barrier.wait(10)
            storage.create_schedule(dialog, "0 9 * * *", "Summarise the news")
            outcomes.append("created")
        except storage.ScheduleLimitError:
            outcomes.append("refused")
        finally:
            close_old_connections()

    threads = [threading.Thread(target=create, args=(dialog,)) for dialog in dialogs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return sorted(outcomes)


def test_racing_creates_of_one_user_stop_at_the_limit(settings):
    settings.PICOBOT = settings.PICOBOT.replace(schedules_per_user=2)
    user, _ = get_or_create_user("alice")
    dialogs = [storage.create_dialog(user, "cli_chat", str(user.pk)) for _ in range(RACERS)]
    assert race(dialogs) == ["created"] * 2 + ["refused"] * (RACERS - 2)
    assert Schedule.objects.filter(owner=user).count() == 2


def test_racing_creates_of_one_ownerless_chat_stop_at_the_limit(settings):
    settings.PICOBOT = settings.PICOBOT.replace(schedules_per_user=1)
    dialogs = [storage.create_dialog(None, "feishu", "oc_group") for _ in range(RACERS)]
    assert race(dialogs) == ["created"] + ["refused"] * (RACERS - 1)
    assert Schedule.objects.filter(dialog__chat_id="oc_group").count() == 1
