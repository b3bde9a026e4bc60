"""The scheduler on SQLite with a controlled clock: a due slot enters the inbox once, runs final-only
and is marked in history; missed runs follow the policy and say so; refusals are recorded."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from conversations.models import Dialog, InboxMessage, ScheduleRun, now_ms
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token
from tests.conversations.schedules.conftest import add_schedule, at, runs_of, schedule_row

pytestmark = [pytest.mark.django_db(transaction=True)]

HOUR = 3_600_000


def chatty() -> ScriptedProvider:
    """Many slow chunks: a live turn would publish running snapshots."""
    return ScriptedProvider([script_text(" ".join(f"w{i}" for i in range(40)))] * 3, delay=0.01)


async def test_a_due_slot_runs_once_final_only_and_is_marked_in_history(connect, start_worker):
    worker = await start_worker(chatty())
    other = await start_worker(chatty(), worker_id="test-host:other")
    client = await connect(await make_token())
    ready = await client.until("ready")
    item, dialog = await add_schedule(tz="Europe/Berlin")
    assert dialog.id == ready["active_session_id"]
    slot = item["next_run_at"]
    assert slot > now_ms()

    worker.scheduler.clock = other.scheduler.clock = at(slot - 1)
    assert await worker.scheduler.tick() == []  # not due yet

    worker.scheduler.clock = other.scheduler.clock = at(slot + 5_000)
    fired = await worker.scheduler.tick()
    assert [(f.schedule_id, f.slot_at, f.status, f.missed) for f in fired] == [
        (item["id"], slot, "queued", False)
    ]
    assert await other.scheduler.tick() == [] and await worker.scheduler.tick() == []  # the slot is taken

    committed = await client.until("turn_committed")
    updates = client.of_type("turn_updated")
    assert updates and all(f["turn"]["status"] != "running" for f in updates)
    user = committed["messages"][0]
    assert user["content"] == "Summarise the news"
    assert user["origin"] == {
        "kind": "schedule",
        "ref": str(item["id"]),
        "label": "Scheduled (0 9 * * *): Summarise the news",
    }
    assert not client.of_type("notification")  # an on-time run is not announced
    assert await runs_of(item["id"]) == [(slot, "queued", False, "")]
    row = await schedule_row(item["id"])
    assert row.next_run_at == slot + 24 * HOUR and (row.last_run_at, row.last_status) == (slot, "queued")


@pytest.mark.parametrize("policy", ["run_once", "skip"])
async def test_a_restart_across_due_times_follows_the_missed_policy_and_says_so(
    policy, connect, start_worker, settings
):
    settings.PICOBOT = settings.PICOBOT.replace(schedule_missed=policy)
    before = await start_worker(chatty(), worker_id="test-host:before")
    client = await connect(await make_token())
    await client.until("ready")
    item, dialog = await add_schedule(cron="@every 1h", prompt="Check the queue")
    first = item["next_run_at"]
    await before.stop(timeout=5)  # the server goes down before the slot…

    after = await start_worker(chatty(), worker_id="test-host:after")
    after.scheduler.clock = at(first + 2 * HOUR + 10 * 60_000)  # …and comes back 2 h 10 min later
    (fired,) = await after.scheduler.tick()
    assert (fired.slot_at, fired.missed, fired.skipped_count) == (first + 2 * HOUR, True, 2)
    notice = await client.until("notification")
    assert notice["session_id"] == dialog.id
    assert f"Scheduled prompt {item['id']} was due at" in notice["content"]
    assert (
        "while the server was down" in notice["content"]
        and "2 earlier time(s) were skipped" in notice["content"]
    )
    runs = await runs_of(item["id"])
    assert [slot for slot, *_ in runs] == [first, first + HOUR, first + 2 * HOUR]
    assert [run[1:] for run in runs][:2] == [("skipped", True, "missed while the server was down")] * 2
    if policy == "run_once":
        assert notice["content"].endswith("it runs late instead. 2 earlier time(s) were skipped.")
        committed = await client.until("turn_committed")
        assert committed["messages"][0]["content"] == "Check the queue"
        label = committed["messages"][0]["origin"]["label"]  # history says so too
        assert label.startswith("Scheduled (@every 1h), late: due ") and "while the server was down" in label
        assert runs[-1][1:3] == ("queued", True)
    else:
        assert "; skipped." in notice["content"]
        assert runs[-1][1:] == ("skipped", True, "missed while the server was down")
        assert await database_sync_to_async(InboxMessage.objects.filter(dialog_id=dialog.id).count)() == 0
    assert await after.scheduler.tick() == []  # nothing runs twice
    assert (await schedule_row(item["id"])).next_run_at == first + 3 * HOUR


async def test_a_full_inbox_refuses_the_slot_and_tells_the_chat(connect, start_worker, settings):
    settings.PICOBOT = settings.PICOBOT.replace(inbox_capacity=1)
    worker = await start_worker(chatty())
    client = await connect(await make_token())
    await client.until("ready")
    item, dialog = await add_schedule(cron="@every 1m", prompt="ping")

    @database_sync_to_async
    def fill() -> None:
        InboxMessage.objects.create(
            user=dialog.owner, dialog=dialog, content="waiting", status="queued", position=1, turn_id=None
        )

    await fill()
    worker.scheduler.clock = at(item["next_run_at"] + 1_000)
    (fired,) = await worker.scheduler.tick()
    assert fired.status == "refused" and "queued" in fired.detail
    notice = await client.until("notification")
    assert (
        notice["level"] == "warning" and f"Scheduled prompt {item['id']} could not run" in notice["content"]
    )
    row = await schedule_row(item["id"])
    assert row.enabled and row.last_status == "refused" and row.next_run_at == item["next_run_at"] + 60_000


async def test_a_deleted_dialog_disables_its_schedule(start_worker):
    worker = await start_worker(chatty())
    item, dialog = await add_schedule(cron="@every 5m")
    await database_sync_to_async(Dialog.objects.filter(pk=dialog.id).update)(deleted_at=now_ms())
    worker.scheduler.clock = at(item["next_run_at"] + 1_000)
    (fired,) = await worker.scheduler.tick()
    assert (fired.status, fired.detail) == ("refused", "its dialog was deleted")
    row = await schedule_row(item["id"])
    assert (row.enabled, row.next_run_at) == (False, None)
    assert await worker.scheduler.tick() == []
    assert await database_sync_to_async(ScheduleRun.objects.count)() == 1


async def test_the_scheduler_polls_by_itself_and_stops_with_the_worker(connect, start_worker, settings):
    settings.PICOBOT = settings.PICOBOT.replace(schedule_poll_seconds=0.05)
    client = await connect(await make_token())
    await client.until("ready")
    item, _ = await add_schedule(cron="@every 1m", prompt="tick")
    worker = await start_worker(chatty())
    worker.scheduler.clock = at(item["next_run_at"] + 1_000)
    committed = await client.until("turn_committed")
    assert committed["messages"][0]["origin"]["ref"] == str(item["id"])
    await worker.stop(timeout=5)
    assert all(task.done() for task in worker._loops)


async def test_run_rows_older_than_the_history_window_are_pruned_once_an_hour(start_worker):
    from conversations.runtime.scheduler import RUN_HISTORY_DAYS

    worker = await start_worker(chatty())
    item, _ = await add_schedule()
    day = 24 * HOUR
    now = item["next_run_at"] - 3 * HOUR  # nothing due during the test
    window = RUN_HISTORY_DAYS * day

    @database_sync_to_async
    def add_runs(*slots: int) -> None:
        ScheduleRun.objects.bulk_create(
            [ScheduleRun(schedule_id=item["id"], slot_at=slot, status="queued") for slot in slots]
        )

    await add_runs(now - window - day, now - window + day)
    worker.scheduler.clock = at(now)
    assert await worker.scheduler.tick() == []
    assert [run[0] for run in await runs_of(item["id"])] == [now - window + day]
    await add_runs(now - window - 2 * day)
    worker.scheduler.clock = at(now + HOUR - 1)
    await worker.scheduler.tick()
    assert len(await runs_of(item["id"])) == 2, "pruned at most once an hour"
    worker.scheduler.clock = at(now + HOUR)
    await worker.scheduler.tick()
    assert [run[0] for run in await runs_of(item["id"])] == [now - window + day]
