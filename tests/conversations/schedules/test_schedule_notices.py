"""A missed or refused scheduled run is said to the chat even when nobody was connected when it was
handled (issue 18 "Must show" 3: a restart across a due time "says so"): the run row keeps its
notice until a connection sent it on ``ready``; the next connection gets nothing again."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.chat import ready_notices
from conversations.models import Dialog, ScheduleRun
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token
from tests.conversations.feishu.conftest import CHAT
from tests.conversations.feishu.test_end_to_end import ask, delivered
from tests.conversations.schedules.conftest import add_schedule, at
from tests.conversations.schedules.test_schedule_commands import eventually
from tests.conversations.schedules.test_scheduler import HOUR, chatty

pytestmark = [pytest.mark.django_db(transaction=True)]


async def answered(client, command: str = "/tasks") -> None:
    """Send a command and wait for its answer: anything the connection sends on ``ready`` came
    before it (pending notices are sent after ``ready`` but while connecting, before frames are
    read), so a notice made later cannot reach this connection by that path."""
    await client.send({"type": "message", "content": command})
    await client.until(
        "notification", lambda f: f["content"].startswith(("Your background tasks", "No background"))
    )


def schedule_notices(client, schedule_id: int) -> list[dict]:
    return [
        f
        for f in client.of_type("notification")
        if str(f.get("id", "")).startswith(f"schedule:{schedule_id}:")
    ]


@database_sync_to_async
def sent_at(schedule_id: int, slot_at: int) -> int | None:
    return ScheduleRun.objects.get(schedule_id=schedule_id, slot_at=slot_at).notice_sent_at


@pytest.mark.parametrize("policy", ["run_once", "skip"])
async def test_a_missed_slot_handled_while_nobody_is_connected_is_said_on_the_next_connect_once(
    policy, connect, start_worker, settings
):
    settings.PICOBOT = settings.PICOBOT.replace(schedule_missed=policy)
    before = await start_worker(chatty(), worker_id="test-host:before")
    token = await make_token()
    item, dialog = await add_schedule(cron="@every 1h", prompt="Check the queue")
    first = item["next_run_at"]
    await before.stop(timeout=5)

    after = await start_worker(chatty(), worker_id="test-host:after")
    after.scheduler.clock = at(first + HOUR + 10 * 60_000)  # back an hour and ten minutes late
    (fired,) = await after.scheduler.tick()  # nobody is connected: the broadcast reaches no one
    assert fired.missed and fired.notice
    assert await sent_at(item["id"], fired.slot_at) is None

    client = await connect(token)
    await client.until("ready")
    await answered(client)
    (notice,) = schedule_notices(client, item["id"])
    assert notice["id"] == f"schedule:{item['id']}:{first + HOUR}"
    assert notice["session_id"] == dialog.id and notice["level"] == "info"
    assert f"Scheduled prompt {item['id']} was due at" in notice["content"]
    assert (
        "while the server was down" in notice["content"]
        and "1 earlier time(s) were skipped" in notice["content"]
    )
    assert ("runs late instead" if policy == "run_once" else "; skipped.") in notice["content"]
    assert await sent_at(item["id"], fired.slot_at) is not None
    assert await sent_at(item["id"], first) is None  # the earlier skipped slot has no notice of its own
    await client.close()

    again = await connect(token)
    await again.until("ready")
    await answered(again)
    assert schedule_notices(again, item["id"]) == []


async def test_a_client_connected_when_it_happens_is_told_live_once_and_nobody_again(connect, start_worker):
    worker = await start_worker(chatty())
    token = await make_token()
    client = await connect(token)
    await client.until("ready")
    await answered(client)  # its connect, pending notices included, is over before the slot fires
    item, _ = await add_schedule(cron="@every 1h", prompt="ping")
    worker.scheduler.clock = at(item["next_run_at"] + 2 * HOUR + 600_000)
    (fired,) = await worker.scheduler.tick()
    notice = await client.until("notification", lambda f: "was due at" in f["content"])
    assert notice["id"] == storage.schedule_notice_id(item["id"], fired.slot_at)
    for _ in range(200):  # the connection that sent it on marks it received
        if await sent_at(item["id"], fired.slot_at) is not None:
            break
        await asyncio.sleep(0.02)
    assert await sent_at(item["id"], fired.slot_at) is not None

    again = await connect(token)
    await again.until("ready")
    await answered(again)
    assert schedule_notices(again, item["id"]) == []
    await answered(client)
    assert len(schedule_notices(client, item["id"])) == 1


async def test_a_broadcast_queued_while_the_connection_sends_its_pending_notices_is_not_sent_again(
    connect, start_worker, monkeypatch
):
    """The slot's live broadcast reaches the group after the connection joined it but before its
    pending-notice query ran: the query and the queued broadcast carry the same notice, and the
    connection sends it once."""
    worker = await start_worker(chatty())
    token = await make_token()
    item, _ = await add_schedule(cron="@every 1h", prompt="ping")
    worker.scheduler.clock = at(item["next_run_at"] + 2 * HOUR + 600_000)
    rebroadcast: list = []
    real_run_storage = ready_notices.run_storage

    async def broadcast_first(fn, *args, **kwargs):
        if fn is storage.pending_automation_notices and not rebroadcast:
            rebroadcast.extend(await worker.scheduler.tick())  # its broadcast waits in the queue
        return await real_run_storage(fn, *args, **kwargs)

    monkeypatch.setattr(ready_notices, "run_storage", broadcast_first)
    client = await connect(token)
    await client.until("ready")
    await answered(client)
    (fired,) = rebroadcast
    (notice,) = schedule_notices(client, item["id"])
    assert notice["id"] == storage.schedule_notice_id(item["id"], fired.slot_at)
    assert await sent_at(item["id"], fired.slot_at) is not None


async def test_notices_of_a_deleted_dialog_are_not_sent(connect, start_worker):
    worker = await start_worker(chatty())
    token = await make_token()
    item, dialog = await add_schedule(cron="@every 1h", prompt="ping")
    worker.scheduler.clock = at(item["next_run_at"] + 2 * HOUR + 600_000)
    await worker.scheduler.tick()
    await database_sync_to_async(storage.delete_dialog)(dialog.owner, "cli_chat", dialog.chat_id, dialog.id)
    client = await connect(token)
    await client.until("ready")
    await answered(client)
    assert schedule_notices(client, item["id"]) == []


async def test_an_ordinary_run_leaves_no_notice_and_unknown_ids_mark_nothing(start_worker):
    worker = await start_worker(chatty())
    item, dialog = await add_schedule(cron="@every 1h", prompt="ping")
    worker.scheduler.clock = at(item["next_run_at"] + 1_000)
    (fired,) = await worker.scheduler.tick()
    assert (fired.status, fired.notice_level, fired.notice) == ("queued", "", "")
    pending = database_sync_to_async(storage.pending_automation_notices)
    assert await pending("cli_chat", dialog.chat_id) == []
    mark = database_sync_to_async(storage.mark_automation_notices_sent)
    assert (
        await mark(["schedule:x:1", "schedule:1", "run:3", "", f"schedule:{item['id']}:{fired.slot_at}"]) == 0
    )


async def test_a_feishu_chat_gets_the_missed_notice_as_a_message_and_the_row_is_marked(
    feishu, feishu_server, start_worker
):
    worker = await start_worker(ScriptedProvider([script_text("Hi there."), script_text("Report: quiet.")]))
    await delivered(await ask(feishu, feishu_server, "hello"))
    dialog = await database_sync_to_async(Dialog.objects.get)(channel="feishu", chat_id=CHAT)
    item = await database_sync_to_async(storage.create_schedule)(dialog, "@every 1h", "Morning report")
    worker.scheduler.clock = at(item["next_run_at"] + 2 * HOUR + 600_000)
    (fired,) = await worker.scheduler.tick()  # the default policy runs the missed slot once
    await eventually(lambda: any("was due at" in m.text for m in feishu_server.api.bot_messages(CHAT)))
    # Marked once the platform confirmed it (``tests/conversations/feishu/test_kept_notices.py``).
    await eventually(
        lambda: ScheduleRun.objects.get(schedule_id=item["id"], slot_at=fired.slot_at).notice_sent_at
    )
    pending = database_sync_to_async(storage.pending_automation_notices)
    assert await pending("feishu", CHAT) == []


async def test_a_run_refused_for_the_budget_says_so_without_advice_meant_for_a_sender(start_worker, settings):
    from tests.conversations.usage.test_budgets import spend

    settings.PICOBOT = settings.PICOBOT.replace(user_daily_tokens=1)
    worker = await start_worker(chatty())
    item, _ = await add_schedule(cron="@every 1h", prompt="ping")
    await spend("alice", 5)
    worker.scheduler.clock = at(item["next_run_at"] + 1_000)
    (fired,) = await worker.scheduler.tick()
    assert (fired.status, fired.notice_level) == ("refused", "warning")
    assert fired.notice.startswith(f"Scheduled prompt {item['id']} could not run at ")
    assert fired.notice.endswith(
        ": Your daily token budget (1 token; 5 used today) is used up; it resets at 00:00 UTC."
    )
    assert "send it again" not in fired.notice and "(in " not in fired.notice  # kept: no time that goes stale
