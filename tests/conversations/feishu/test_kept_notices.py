"""Kept automation notices in a Feishu chat (issue 18 "Must show" 3: a missed slot "says so"):
the run row is marked sent only once the platform confirmed the message; a notice whose send
failed, or whose process died with it queued, is sent again by the recovery scan with the same
key, so the chat shows it once (FEISHU.md §7: one message per uuid for an hour)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.models import Dialog, ScheduleRun, now_ms
from providers.testing import ScriptedProvider, script_text
from tests.conversations.feishu.conftest import CHAT, make_platform
from tests.conversations.feishu.test_end_to_end import ask, delivered
from tests.conversations.schedules.conftest import at
from tests.conversations.schedules.test_schedule_commands import eventually
from tests.conversations.schedules.test_scheduler import HOUR

pytestmark = [pytest.mark.django_db(transaction=True)]


def is_notice(kwargs: dict) -> bool:
    return "was due at" in json.dumps(kwargs.get("content"))


def shown(server) -> list[str]:
    """The missed-slot notices the user sees in the chat."""
    return [m.text for m in server.api.bot_messages(CHAT) if "was due at" in m.text]


def notice_sends(server) -> int:
    return sum(1 for name, kwargs in server.api.calls if name == "send_message" and is_notice(kwargs))


def marked(schedule_id: int, slot_at: int) -> int | None:
    return ScheduleRun.objects.get(schedule_id=schedule_id, slot_at=slot_at).notice_sent_at


sent_at = database_sync_to_async(marked)


async def missed_slot(feishu, feishu_server, start_worker) -> tuple[int, int]:
    """A Feishu chat's schedule whose slot was missed two hours ago: fired now; returns
    ``(schedule id, slot_at)``."""
    worker = await start_worker(ScriptedProvider([script_text("Hi there."), script_text("Report: quiet.")]))
    await delivered(await ask(feishu, feishu_server, "hello"))
    dialog = await database_sync_to_async(Dialog.objects.get)(channel="feishu", chat_id=CHAT)
    item = await database_sync_to_async(storage.create_schedule)(dialog, "@every 1h", "Morning report")
    worker.scheduler.clock = at(item["next_run_at"] + 2 * HOUR + 600_000)
    (fired,) = await worker.scheduler.tick()
    assert fired.notice
    return item["id"], fired.slot_at


async def until_logged(caplog, text: str, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if any(text in r.getMessage() for r in caplog.records):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no log line with {text!r}")


async def test_a_notice_whose_send_failed_is_sent_again_by_the_scan_and_then_marked(
    feishu, feishu_server, start_worker, caplog
):
    caplog.set_level(logging.WARNING, logger="conversations.feishu.platform")
    feishu_server.api.fail("send_message", None, times=3, when=is_notice)  # every attempt: not applied
    schedule_id, slot_at = await missed_slot(feishu, feishu_server, start_worker)
    await until_logged(caplog, "may not have been sent")
    assert shown(feishu_server) == [] and await sent_at(schedule_id, slot_at) is None

    await feishu.scan_once()  # the live send's retries have not settled yet: not sent again
    assert notice_sends(feishu_server) == 3

    feishu.settled_ms = 0
    await feishu.scan_once()
    assert len(await eventually(lambda: shown(feishu_server))) == 1
    assert await eventually(lambda: marked(schedule_id, slot_at))
    await feishu.scan_once()  # marked: nothing more
    await asyncio.sleep(0.3)
    assert notice_sends(feishu_server) == 4 and len(shown(feishu_server)) == 1


async def test_a_notice_the_platform_took_without_answering_is_shown_once_after_the_resend(
    feishu, feishu_server, start_worker, caplog
):
    caplog.set_level(logging.WARNING, logger="conversations.feishu.platform")
    # Applied, then the connection drops: the message is there, but nobody knows it.
    feishu_server.api.fail("send_message", None, times=3, applied=True, when=is_notice)
    schedule_id, slot_at = await missed_slot(feishu, feishu_server, start_worker)
    await until_logged(caplog, "may not have been sent")
    assert len(shown(feishu_server)) == 1 and await sent_at(schedule_id, slot_at) is None

    feishu.settled_ms = 0
    await feishu.scan_once()
    assert await eventually(lambda: marked(schedule_id, slot_at))
    assert len(shown(feishu_server)) == 1  # the same uuid: the platform kept its first message


async def test_a_notice_the_chat_refuses_for_good_is_not_sent_again(
    feishu, feishu_server, start_worker, caplog
):
    caplog.set_level(logging.WARNING, logger="conversations.feishu.platform")
    feishu_server.api.fail("send_message", 230002, when=is_notice)  # the bot is not in the chat
    schedule_id, slot_at = await missed_slot(feishu, feishu_server, start_worker)
    await until_logged(caplog, "refused for good")
    assert await eventually(lambda: marked(schedule_id, slot_at))  # settled: nothing to retry
    feishu.settled_ms = 0
    await feishu.scan_once()
    await asyncio.sleep(0.3)
    assert notice_sends(feishu_server) == 1 and shown(feishu_server) == []


async def test_a_notice_queued_when_its_process_stopped_is_sent_by_the_next_process(
    feishu, feishu_server, start_worker
):
    hold = feishu_server.hold("send_message", when=is_notice)  # taken, never answered
    try:
        schedule_id, slot_at = await missed_slot(feishu, feishu_server, start_worker)
        await asyncio.get_running_loop().run_in_executor(None, hold.applied.wait, 10)
        await feishu.stop(timeout=0.5)  # the process stops with the send in flight
        assert await sent_at(schedule_id, slot_at) is None

        after = make_platform(feishu_server)  # the next process's platform
        try:
            after.settled_ms = 0
            await after.scan_once()
            assert await eventually(lambda: marked(schedule_id, slot_at))
        finally:
            await after.stop(timeout=2)
        assert len(shown(feishu_server)) == 1
    finally:
        hold.release.set()


async def test_the_scan_leaves_notices_older_than_the_uuid_hour_and_other_channels_alone(
    feishu, feishu_server, start_worker
):
    feishu_server.api.fail("send_message", None, times=3, when=is_notice)
    await missed_slot(feishu, feishu_server, start_worker)
    unsent = database_sync_to_async(storage.unsent_platform_notices)
    now = now_ms()
    (item,) = await unsent("feishu", made_after=now - HOUR, made_before=now + 1)
    assert item["chat_id"] == CHAT and item["id"].startswith("schedule:")
    assert await unsent("feishu", made_after=now + 1, made_before=now + HOUR) == []
    assert await unsent("cli_chat", made_after=now - HOUR, made_before=now + 1) == []
