"""``/schedule`` on the shared command path (WebUI/TUI WebSocket and Feishu), and a scheduled turn
of a Feishu chat delivered to that chat final-only."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from conversations.chat.schedule_command import split_add
from conversations.models import Dialog, Schedule
from providers.testing import ScriptedProvider, script_text
from tests.conversations.conftest import make_token
from tests.conversations.feishu.conftest import CHAT
from tests.conversations.feishu.test_end_to_end import ask, delivered
from tests.conversations.schedules.conftest import add_schedule, at

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(
    ("argument", "parts"),
    [
        ('"0 9 * * *" Summarise the news', ("0 9 * * *", "Summarise the news")),
        ("'*/5 * * * *' check\nthe logs", ("*/5 * * * *", "check\nthe logs")),
        ("@every 30m stretch", ("@every 30m", "stretch")),
        ("@daily good morning", ("@daily", "good morning")),
        # Typographic quotes: as the answers and /schedule list show a cron, or a keyboard curls them.
        ("“0 9 * * *” smart quotes", ("0 9 * * *", "smart quotes")),
        ("”0 9 * * *” both closing", ("0 9 * * *", "both closing")),
        ("‘*/5 * * * *’ single", ("*/5 * * * *", "single")),
        ("«0 9 * * 1» lundi", ("0 9 * * 1", "lundi")),
    ],
)
def test_add_takes_a_quoted_cron_expression_or_an_at_form_then_the_prompt(argument, parts):
    assert split_add(argument) == parts


@pytest.mark.parametrize(
    "argument", ["0 9 * * * no quotes", '"0 9 * * *   ', "", '"0 9 * * *"prompt', "“0 9 * * * open"]
)
def test_add_without_a_quoted_cron_expression_and_a_prompt_is_refused(argument):
    with pytest.raises(ValueError, match="put the cron expression in quotes"):
        split_add(argument)


@pytest.mark.parametrize("argument", ['"0 9 * * *"', "'*/1 * * * *'  ", "@daily", "@every 5m", "“0 9 * * *”"])
def test_add_with_a_cron_expression_but_no_prompt_says_the_prompt_is_missing(argument):
    with pytest.raises(ValueError, match="the prompt is missing"):
        split_add(argument)


async def eventually(read, timeout: float = 10.0):
    """``read()``'s first truthy value (run on the DB thread), polled every 50 ms."""
    for _ in range(int(timeout / 0.05)):
        value = await database_sync_to_async(read)()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError("nothing within the timeout")


async def command(client, text: str, kind: str = "notification") -> dict:
    await client.send({"type": "message", "content": text})
    return await client.until(kind)


async def test_schedule_add_list_pause_resume_delete_from_the_webui(connect):
    client = await connect(await make_token())
    ready = await client.until("ready")
    added = await command(client, '/schedule add "30 8 * * 1" Plan the week')
    item = added["schedule"]
    assert added["session_id"] == ready["active_session_id"] == item["session_id"]
    assert f"Scheduled prompt {item['id']} added" in added["content"] and "next " in added["content"]
    assert (item["cron"], item["tz"], item["prompt"]) == ("30 8 * * 1", "UTC", "Plan the week")

    await command(client, "/new second")
    listing = await command(client, "/schedule list")  # from another dialog: all of the user's
    assert [s["id"] for s in listing["schedules"]] == [item["id"]]
    assert (
        f"#{item['id']} “30 8 * * 1” (UTC) · next " in listing["content"]
        and f" · in “{item['dialog_title']}” ({item['session_id'].rsplit(':', 1)[-1]}) · Plan the week"
        in listing["content"]  # the other dialog, told apart from others of its title
    )

    paused = await command(client, f"/schedule pause {item['id']}")
    assert paused["schedule"]["enabled"] is False and "Paused" in paused["content"]
    assert "· paused ·" in (await command(client, "/schedule list"))["content"]
    assert (await command(client, f"/schedule resume {item['id']}"))["schedule"]["next_run_at"]

    deleted = await command(client, f"/schedule delete {item['id']}")
    assert f"Deleted scheduled prompt {item['id']}" in deleted["content"]
    assert (await command(client, "/schedule list"))["schedules"] == []
    assert await database_sync_to_async(Schedule.objects.count)() == 0


async def test_schedule_errors_are_answered_and_change_nothing(connect, settings):
    settings.PICOBOT = settings.PICOBOT.replace(schedules_per_user=1)
    theirs, _ = await add_schedule("bob")
    client = await connect(await make_token())
    await client.until("ready")
    for text, code, says in [
        ("/schedule", "invalid_command", "usage: /schedule add"),
        ("/schedule frobnicate", "invalid_command", "usage: /schedule add"),
        ("/schedule add 0 9 * * * hi", "invalid_command", "put the cron expression in quotes"),
        ('/schedule add "0 9 * *" hi', "invalid_command", "cron: a cron expression has 5 fields"),
        ('/schedule add "@every 20s" hi', "invalid_command", 'cron: write an interval as "@every N"'),
        (f"/schedule delete {theirs['id']}", "not_found", f"no such schedule {theirs['id']}"),
        (f"/schedule pause {theirs['id']}", "not_found", "no such schedule"),
        ("/schedule delete nope", "not_found", "no such schedule nope"),
        ("/schedule delete 1 2", "invalid_command", "usage"),
    ]:
        error = await command(client, text, "error")
        assert error["code"] == code and says in error["message"], (text, error)
    await command(client, '/schedule add "@daily" first')
    error = await command(client, '/schedule add "@daily" second', "error")
    assert "already have 1 scheduled prompts" in error["message"]
    assert await database_sync_to_async(Schedule.objects.filter(pk=theirs["id"], enabled=True).exists)()


async def test_help_lists_schedule(connect):
    client = await connect(await make_token())
    await client.until("ready")
    assert '/schedule add "<cron>" <prompt>' in (await command(client, "/help"))["content"]


async def test_a_feishu_chat_schedules_and_gets_the_run_as_a_message_of_its_own(
    feishu, feishu_server, start_worker
):
    worker = await start_worker(
        ScriptedProvider([script_text("Hi there."), script_text("Morning report: all quiet.")])
    )
    await delivered(await ask(feishu, feishu_server, "hello"))
    await ask(feishu, feishu_server, '/schedule add "0 7 * * *" Morning report')
    dialog = await database_sync_to_async(Dialog.objects.get)(channel="feishu", chat_id=CHAT)
    schedule = await eventually(lambda: Schedule.objects.filter(dialog=dialog).first())
    assert schedule.owner_id is None and schedule.tz == "UTC"
    await ask(feishu, feishu_server, "/schedule list")

    worker.scheduler.clock = at(schedule.next_run_at + 1_000)
    (fired,) = await worker.scheduler.tick()
    assert fired.status == "queued"
    await eventually(lambda: any("all quiet" in m.text for m in feishu_server.api.bot_messages(CHAT)))
    bot = feishu_server.api.bot_messages(CHAT)
    answer = [m for m in bot if "Morning report: all quiet." in m.text]
    assert len(answer) == 1 and answer[0].reply_to is None  # a message of its own in the chat
    assert any(f"Scheduled prompt {schedule.pk} added" in m.text for m in bot)
    assert any(f"#{schedule.pk} “0 7 * * *” (UTC)" in m.text for m in bot)
    assert answer[0].card_id is None  # final-only: no streaming card
