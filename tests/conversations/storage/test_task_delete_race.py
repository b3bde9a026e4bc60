"""A background task that ends while its dialog is deleted: no lock cycle, and nothing to tell.

``end_task`` locks the task row, then the dialog (queueing the TaskNotification); ``delete_dialog``
asks the dialog's running tasks to stop before it locks the dialog row, in the same order. On
PostgreSQL the opposite order deadlocked nearly every time the two met; run there too by
``tests/services/test_storage_postgres.py`` (SQLite serialises writers).
"""

from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.models import BackgroundTask, InboxMessage
from conversations.storage import tasks as task_rows

pytestmark = pytest.mark.django_db(transaction=True)
ROUNDS = 12


def race(*calls) -> list[BaseException]:
    """Run ``calls`` at once (a barrier lines them up); the exceptions they raised."""
    barrier = threading.Barrier(len(calls))
    errors: list[BaseException] = []

    def run(call) -> None:
        try:
            barrier.wait(10)
            call()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return errors


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_a_task_ending_while_its_dialog_is_deleted_neither_deadlocks_nor_tells_anyone(status):
    user, _ = get_or_create_user("alice")
    for n in range(ROUNDS):
        dialog = storage.create_dialog(user, "cli_chat", str(user.pk))
        task = BackgroundTask.objects.create(
            id=f"race{n:06d}", dialog=dialog, owner=user, prompt="count the files", worker_id="w1"
        )
        errors = race(
            lambda task_id=task.id: task_rows.end_task(task_id, "w1", status, result="42 files"),
            lambda dialog_id=dialog.id: storage.delete_dialog(user, "cli_chat", str(user.pk), dialog_id),
        )
        assert errors == [], errors
        task.refresh_from_db()
        assert task.status == status
        # Ended first: its notification was queued, then dropped by the delete; deleted first: none.
        queued = InboxMessage.objects.filter(dialog=dialog, status=InboxMessage.Status.QUEUED)
        assert not queued.exists()
        assert task.notice == "" and storage.pending_automation_notices("cli_chat", str(user.pk)) == []
