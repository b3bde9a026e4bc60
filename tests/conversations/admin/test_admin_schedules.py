"""Scheduled prompts in the admin: listed and filtered, edited with the rules of ``/schedule``
(a bad cron expression or zone is refused in the form), paused and resumed; run rows read-only."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from conversations import storage
from conversations.models import Schedule, ScheduleRun
from tests.conversations.dialogs import make_dialog

pytestmark = [pytest.mark.django_db]

SCHEDULES = "/admin/conversations/schedule/"
RUNS = "/admin/conversations/schedulerun/"


@pytest.fixture
def schedule():
    alice = get_user_model().objects.create_user("alice", password="pw-for-tests")
    item = storage.create_schedule(make_dialog(alice), "0 9 * * *", "Daily report", "Europe/Berlin")
    return Schedule.objects.get(pk=item["id"])


def form_data(**changes) -> dict:
    return {"enabled": "on", "cron": "0 9 * * *", "tz": "Europe/Berlin", "prompt": "Daily report", **changes}


def test_schedules_are_listed_filtered_and_searched(staff_client, schedule):
    page = staff_client.get(SCHEDULES)
    assert page.status_code == 200 and [r.pk for r in page.context["cl"].result_list] == [schedule.pk]
    assert "Daily report" in page.content.decode() and "Europe/Berlin" in page.content.decode()
    assert staff_client.get(SCHEDULES + "?enabled__exact=0").context["cl"].result_list.count() == 0
    assert staff_client.get(SCHEDULES + "?q=daily").context["cl"].result_list.count() == 1


def test_an_edit_is_checked_and_a_new_cron_counts_from_now(staff_client, schedule):
    url = f"{SCHEDULES}{schedule.pk}/change/"
    assert staff_client.get(url).status_code == 200
    for bad, field in ((form_data(cron="0 9 * *"), "cron"), (form_data(tz="Europe"), "tz")):
        response = staff_client.post(url, bad)
        assert response.status_code == 200 and field in response.context["adminform"].form.errors
    assert Schedule.objects.get(pk=schedule.pk).cron == "0 9 * * *"

    response = staff_client.post(url, form_data(cron="@every 1h", prompt="Hourly"))
    assert response.status_code == 302
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.cron, row.prompt) == ("@every 1h", "Hourly")
    assert row.next_run_at == row.anchor_at + 3_600_000

    response = staff_client.post(url, form_data(cron="@every 1h", prompt="Hourly", enabled=""))
    assert Schedule.objects.get(pk=schedule.pk).next_run_at is None


def test_pause_and_resume_actions(staff_client, schedule):
    staff_client.post(SCHEDULES, {"action": "pause", "_selected_action": [schedule.pk]})
    assert Schedule.objects.get(pk=schedule.pk).next_run_at is None
    staff_client.post(SCHEDULES, {"action": "resume", "_selected_action": [schedule.pk]})
    row = Schedule.objects.get(pk=schedule.pk)
    assert row.enabled and row.next_run_at is not None


def test_runs_are_listed_per_schedule_and_read_only(staff_client, schedule):
    run = ScheduleRun.objects.create(
        schedule=schedule, slot_at=1_700_000_000_000, status="skipped", missed=True
    )
    page = staff_client.get(f"{SCHEDULES}{schedule.pk}/change/")
    assert "1 run records" in page.content.decode()
    listing = staff_client.get(f"{RUNS}?schedule__id__exact={schedule.pk}")
    assert [r.pk for r in listing.context["cl"].result_list] == [run.pk]
    assert staff_client.get(f"{SCHEDULES}add/").status_code == 403
    assert staff_client.post(f"{RUNS}{run.pk}/delete/").status_code == 403


def test_a_deleted_dialogs_schedule_is_marked_and_cannot_be_resumed(staff_client, schedule):
    dialog = schedule.dialog
    storage.delete_dialog(dialog.owner, dialog.channel, dialog.chat_id, dialog.id)
    assert "(deleted)" in staff_client.get(SCHEDULES).content.decode()

    response = staff_client.post(
        SCHEDULES, {"action": "resume", "_selected_action": [schedule.pk]}, follow=True
    )
    assert "0 schedule(s) resumed. 1 not: their dialog was deleted." in response.content.decode()
    edit = staff_client.post(f"{SCHEDULES}{schedule.pk}/change/", form_data())
    assert "its dialog was deleted" in str(edit.context["adminform"].form.errors["enabled"])
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.enabled, row.next_run_at) == (False, None)
