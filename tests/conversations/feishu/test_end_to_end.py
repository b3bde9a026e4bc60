"""A Feishu message answered by the real agent worker through the fake Open API over HTTP (issue "Must show").

Each test sends an ``im.message.receive_v1`` into the receiver (the webhook's own path after
verification), lets the worker run the turn with a scripted provider, and reads what the user sees
in the fake chat: one card replying to the message, exactly one final, whatever fails.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async

from conversations.feishu import platform as platform_module
from conversations.feishu.platform import FeishuPlatform, uninstall
from conversations.models import FeishuMessage, InboxMessage, now_ms
from delivery.coordinator import FINISH_BUDGET
from delivery.platforms.feishu.cards import CARD_TEXT_BUDGET, text_size
from providers.testing import ScriptedProvider, script_text, script_tool_call
from tests.conversations.feishu.conftest import CHAT, GROUP, make_platform, message_event
from tests.delivery.feishu.test_split import fences_balanced

pytestmark = [pytest.mark.django_db(transaction=True)]
SECRET = "SECRET-REASONING-never-shown"


@database_sync_to_async
def row(message_id: str) -> FeishuMessage:
    return FeishuMessage.objects.select_related("inbox").get(message_id=message_id)


async def delivered(message_id: str, timeout: float = 15.0) -> FeishuMessage:
    """Waits until the platform confirmed the final of the answer to ``message_id``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        found = await database_sync_to_async(FeishuMessage.objects.filter(message_id=message_id).first)()
        if found is not None and found.final_delivered_at is not None:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"no confirmed final for {message_id} within {timeout} s")


async def ask(feishu, server, text: str, *, chat_id: str = CHAT, **event) -> str:
    """The user writes ``text`` in the fake chat; the event reaches the receiver. Returns its id."""
    message_id = server.api.user_message(chat_id, text)
    result = await feishu.receiver.receive(message_event(message_id, text, chat_id=chat_id, **event))
    assert result in ("accepted", "pending"), result
    return message_id


def tool_turn() -> ScriptedProvider:
    return ScriptedProvider(
        [
            script_tool_call("call_1", "current_time", {}, text="Let me check the clock."),
            script_text("It is exactly noon.", reasoning=SECRET),
        ],
        delay=0.1,  # the card's running updates are 0.5 s apart: a turn of ~2 s shows several
    )


async def test_text_tool_text_is_one_card_with_ordered_blocks_and_one_final(
    feishu, feishu_server, start_worker
):
    await start_worker(tool_turn())
    user = await ask(feishu, feishu_server, "what time is it?")
    await delivered(user)
    (bot,) = feishu_server.api.bot_messages(CHAT)
    assert bot.reply_to == user and bot.card_id is not None
    assert not feishu_server.api.is_streaming(bot.card_id)
    text = bot.text
    assert (
        text.index("Let me check the clock.") < text.index("current_time") < text.index("It is exactly noon.")
    )
    assert "Running tools" not in text and "…" not in text.splitlines()[-1]
    calls = json.dumps(feishu_server.requests, ensure_ascii=False)
    assert SECRET not in calls
    assert len(feishu_server.api.ops("create_card")) == 1
    # the card was streamed: running states before the final
    assert len(feishu_server.api.ops("stream_text")) >= 2


async def test_when_the_card_cannot_be_opened_exactly_one_complete_final_message_goes_out(
    feishu, feishu_server, start_worker
):
    feishu_server.api.fail("create_card", 99991672, times=None)  # the app lacks the CardKit scope
    await start_worker(tool_turn())
    user = await ask(feishu, feishu_server, "what time is it?")
    await delivered(user)
    (bot,) = feishu_server.api.bot_messages(CHAT)
    assert bot.card_id is None and bot.reply_to == user
    assert "It is exactly noon." in bot.text and SECRET not in bot.text


async def test_a_final_refused_because_the_card_can_no_longer_change_goes_once_as_a_new_message(
    feishu, feishu_server, start_worker
):
    feishu_server.api.fail("stream_text", 200750, times=None, when=lambda kw: "noon" in kw["text"])
    answer = "Thinking about it, one word at a time, slowly enough for the card to open. It is exactly noon."
    await start_worker(ScriptedProvider([script_text(answer)], delay=0.1))
    user = await ask(feishu, feishu_server, "time?")
    await delivered(user)
    card, final = feishu_server.api.bot_messages(CHAT)
    assert card.card_id is not None and "noon" not in card.text
    assert final.card_id is None and final.text == answer
    assert final.reply_to == user


async def test_rate_limits_during_streaming_skip_states_and_the_final_arrives_once(
    feishu, feishu_server, start_worker
):
    feishu_server.api.fail("stream_text", 99991400, http_status=429, retry_after=0.3, times=4)
    words = " ".join(f"word{i}" for i in range(60))
    await start_worker(ScriptedProvider([script_text(words)], delay=0.01))
    user = await ask(feishu, feishu_server, "long one")
    await delivered(user)
    (bot,) = feishu_server.api.bot_messages(CHAT)
    assert bot.text == words and not feishu_server.api.is_streaming(bot.card_id)
    applied = [kw["text"] for _, kw in feishu_server.api.ops("stream_text")]
    assert len(applied) < 60  # intermediate states were skipped, never queued


def long_answer() -> str:
    paragraphs = []
    for i in range(42):
        paragraphs.append(f"## Part {i}\n\n" + "汉字 and words 👍🏽 " * 30)
        paragraphs.append("```python\n" + "\n".join(f"print({i}, {j})  # ✓" for j in range(25)) + "\n```")
    text = "\n\n".join(paragraphs)
    assert len(text) >= 40_000
    return text


async def test_a_40000_character_answer_is_split_without_loss_or_a_cut_fence(
    feishu, feishu_server, start_worker
):
    answer = long_answer()
    await start_worker(ScriptedProvider([script_text(answer)]))
    user = await ask(feishu, feishu_server, "write a lot")
    await delivered(user, timeout=30)
    bots = feishu_server.api.bot_messages(CHAT)
    assert len(bots) >= 3
    assert all(bot.reply_to == user for bot in bots)
    for bot in bots:
        assert fences_balanced(bot.text) and text_size(bot.text) <= CARD_TEXT_BUDGET
    # nothing lost: the parts, without the fence lines added at the cuts, are the answer
    joined = "".join(bot.text for bot in bots)
    assert joined.replace("```python\n", "").replace("```", "") == answer.replace("```python\n", "").replace(
        "```", ""
    )


async def test_in_a_group_the_answer_replies_to_the_message_in_that_group(
    feishu, feishu_server, start_worker
):
    await start_worker(ScriptedProvider([script_text("Hello group.")]))
    user = await ask(feishu, feishu_server, "hi", chat_id=GROUP, chat_type="group", mention_bot=True)
    await delivered(user)
    (bot,) = feishu_server.api.bot_messages(GROUP)
    assert bot.reply_to == user and bot.text == "Hello group."
    assert feishu_server.api.bot_messages(CHAT) == []


async def test_a_redelivered_message_gets_no_second_answer(feishu, feishu_server, start_worker):
    provider = ScriptedProvider([script_text("Only once.")])
    await start_worker(provider)
    user = feishu_server.api.user_message(CHAT, "hi")
    event = message_event(user, "hi")
    assert await feishu.receiver.receive(event) == "accepted"
    await delivered(user)
    assert await feishu.receiver.receive(event) == "duplicate"
    await asyncio.sleep(0.3)
    assert len(feishu_server.api.bot_messages(CHAT)) == 1 and len(provider.requests) == 1


@pytest.mark.parametrize("streaming", ["card", "final_only"])
async def test_killed_after_the_platform_accepted_the_final_the_restart_shows_it_once(
    feishu_server, start_worker, monkeypatch, streaming
):
    """The process dies after the platform applied the final but before it recorded that: the
    next process's recovery delivers it again with the same uuids/card, and the user sees one."""
    first = make_platform(feishu_server, streaming=streaming)
    if streaming == "card":
        hold = feishu_server.hold("set_streaming", when=lambda kw: kw["enabled"] is False)
    else:
        hold = feishu_server.hold("reply_message", when=lambda kw: kw["uuid"].endswith(":final"))
    answer = "The one and only answer, streamed slowly enough for its card to open first."
    await start_worker(ScriptedProvider([script_text(answer)], delay=0.1))
    user = await ask(first, feishu_server, "question")
    assert await asyncio.to_thread(hold.applied.wait, 15)

    # The process is dead from here on: no card store it made records anything again, so its
    # own retries (still scheduled in this test's event loop) never act after the "restart".
    restarted = asyncio.Event()
    real_init, real_save = platform_module._CardStore.__init__, platform_module._CardStore.save

    def init(self, inbox_id):
        real_init(self, inbox_id)
        self.alive = restarted.is_set()

    async def save(self, turn_id, state):
        if not getattr(self, "alive", False):
            await asyncio.Event().wait()
        await real_save(self, turn_id, state)

    monkeypatch.setattr(platform_module._CardStore, "__init__", init)
    monkeypatch.setattr(platform_module._CardStore, "save", save)
    hold.release.set()
    found = await row(user)
    assert found.final_delivered_at is None and found.inbox.status == "done"
    restarted.set()

    uninstall()
    second = make_platform(feishu_server, streaming=streaming)  # the restarted process
    second.settled_ms = 0
    try:
        await asyncio.sleep(0.01)
        await second.scan_once()
        await delivered(user, timeout=5)
    finally:
        await second.stop(timeout=1)
        uninstall()
    (bot,) = feishu_server.api.bot_messages(CHAT)
    assert bot.text == answer and bot.reply_to == user
    if bot.card_id is not None:
        assert not feishu_server.api.is_streaming(bot.card_id)


async def test_slash_commands_are_answered_as_plain_replies(feishu, feishu_server, start_worker):
    await start_worker(ScriptedProvider([]))
    command = await ask(feishu, feishu_server, "/help")
    for _ in range(100):
        if feishu_server.api.bot_messages(CHAT):
            break
        await asyncio.sleep(0.05)
    (answer,) = feishu_server.api.bot_messages(CHAT)
    assert answer.reply_to == command and "/new" in answer.text and "/stop" in answer.text
    for _ in range(100):
        if (await row(command)).status == FeishuMessage.Status.ANSWERED:
            break
        await asyncio.sleep(0.05)
    assert (await row(command)).status == FeishuMessage.Status.ANSWERED


async def test_stop_from_feishu_stops_the_running_turn_and_its_card_says_so(
    feishu, feishu_server, start_worker
):
    words = " ".join(f"w{i}" for i in range(400))
    await start_worker(ScriptedProvider([script_text(words)], delay=0.02))
    user = await ask(feishu, feishu_server, "go on and on")
    for _ in range(200):
        if feishu_server.api.bot_messages(CHAT):
            break
        await asyncio.sleep(0.02)
    await ask(feishu, feishu_server, "/stop")
    await delivered(user)
    card = next(m for m in feishu_server.api.bot_messages(CHAT) if m.card_id is not None)
    assert card.reply_to == user and "stopped" in card.text.lower()
    assert not feishu_server.api.is_streaming(card.card_id)


async def test_the_platform_stops_cleanly(feishu_server):
    platform: FeishuPlatform = make_platform(feishu_server)
    await platform.start()
    assert await platform.bot_open_id() == "ou_bot"
    await platform.stop(timeout=1)
    uninstall()


@database_sync_to_async
def failures() -> list:
    from delivery.models import DeliveryFailure

    return list(DeliveryFailure.objects.values("channel", "chat_id", "stage", "error"))


async def test_a_chat_that_refuses_the_answer_is_recorded_once_and_not_retried_forever(
    feishu, feishu_server, start_worker, monkeypatch
):
    feishu_server.api.fail("reply_message", 230002, times=None)  # the bot was removed from the group
    feishu_server.api.fail("send_message", 230002, times=None)
    await start_worker(ScriptedProvider([script_text("Nobody will read this.")]))
    user = await ask(feishu, feishu_server, "hello")
    for _ in range(200):
        if await failures():
            break
        await asyncio.sleep(0.05)
    (failure,) = await failures()
    assert failure["channel"] == "feishu" and failure["chat_id"] == CHAT
    feishu.settled_ms = 0
    await asyncio.sleep(0.01)
    await feishu.scan_once()  # tries once more, is refused for good, gives up
    tried = len(feishu_server.requests)
    await feishu.scan_once()
    assert len(feishu_server.requests) == tried  # never again
    assert len(await failures()) == 1 and feishu_server.api.bot_messages(CHAT) == []
    assert (await row(user)).final_delivered_at is None


async def test_a_final_not_confirmed_within_the_uuid_hour_is_given_up_and_recorded(
    feishu, feishu_server, start_worker, monkeypatch
):
    answer = "An answer whose card never closes, slowly enough for the card to open first."
    feishu_server.api.fail("set_streaming", None, times=None, when=lambda kw: kw["enabled"] is False)
    await start_worker(ScriptedProvider([script_text(answer)], delay=0.1))
    user = await ask(feishu, feishu_server, "hello")
    for _ in range(300):
        found = await row(user)
        if found.inbox.status == "done":
            break
        await asyncio.sleep(0.05)
    monkeypatch.setattr(platform_module, "FINAL_MAX_AGE_MS", 0)
    await asyncio.sleep(0.01)
    await feishu.scan_once()
    found = await row(user)
    assert found.final_delivered_at is None and "not confirmed within 0 min" in found.note
    assert len(await failures()) == 1  # the executor's record of the failed finish; no second one


async def test_the_recovery_scan_leaves_a_final_alone_while_its_live_process_may_still_retry(
    feishu, feishu_server, start_worker
):
    """A slow process is not dead: another process's scan delivers an unconfirmed final again only
    once the live process's own finish attempts (``FINISH_BUDGET``) and two scan periods are over;
    two deliveries racing on one card could leave the answer shown twice."""
    answer = "An answer whose card never closes, slowly enough for the card to open first."
    feishu_server.api.fail("set_streaming", None, times=None, when=lambda kw: kw["enabled"] is False)
    await start_worker(ScriptedProvider([script_text(answer)], delay=0.1))
    user = await ask(feishu, feishu_server, "hello")
    for _ in range(300):
        if await failures():  # the live process's attempts are over
            break
        await asyncio.sleep(0.05)
    assert await failures()
    other = FeishuPlatform(feishu.config, api=feishu.api)  # another process, default settings
    settled_ms = int(1_000 * (FINISH_BUDGET + 2 * feishu.config.recovery_seconds))
    assert other.settled_ms == settled_ms

    async def ended_ago(ms: int) -> int:
        await database_sync_to_async(
            lambda: InboxMessage.objects.filter(feishu__message_id=user).update(finished_at=now_ms() - ms)
        )()
        before = len(feishu_server.requests)
        await other.scan_once()
        return len(feishu_server.requests) - before

    assert await ended_ago(int(1_000 * FINISH_BUDGET) + 1_000) == 0
    assert await ended_ago(settled_ms + 1_000) > 0  # now it is tried again


@database_sync_to_async
def dialog_titles(chat_id: str) -> list[str]:
    from conversations.models import Dialog

    return sorted(
        Dialog.objects.filter(chat_id=chat_id, deleted_at__isnull=True).values_list("title", flat=True)
    )


async def test_a_command_has_its_effect_once_even_when_its_answer_hangs_past_the_claim(
    feishu, feishu_server, start_worker, monkeypatch
):
    await start_worker(ScriptedProvider([]))
    hold = feishu_server.hold(
        "reply_message", when=lambda kw: "Held title" in json.dumps(kw, ensure_ascii=False)
    )
    command = await ask(feishu, feishu_server, "/new Held title")
    assert await asyncio.to_thread(hold.applied.wait, 15)
    assert (await row(command)).status == FeishuMessage.Status.ANSWERED  # before its answer went out
    monkeypatch.setattr(platform_module, "RECEIVED_GRACE_MS", -60_000)
    await database_sync_to_async(FeishuMessage.objects.filter(message_id=command).update)(claimed_until=0)
    await feishu.scan_once()  # its claim has lapsed, yet the recovery scan finds nothing to run again
    hold.release.set()
    await asyncio.sleep(0.5)
    assert await dialog_titles(CHAT) == ["Held title"]


async def test_command_answers_never_mention_anyone(feishu, feishu_server, start_worker):
    await start_worker(ScriptedProvider([]))
    await ask(
        feishu,
        feishu_server,
        '/new <at user_id="all"></at>',
        chat_id=GROUP,
        chat_type="group",
        mention_bot=True,
    )
    for _ in range(100):
        if feishu_server.api.bot_messages(GROUP):
            break
        await asyncio.sleep(0.05)
    texts = [m.text for m in feishu_server.api.bot_messages(GROUP)]
    assert texts and all("<at" not in text.lower() for text in texts)


async def test_a_failure_whose_final_the_recovery_delivered_is_shown_resolved(
    feishu, feishu_server, start_worker
):
    # Every close of the card fails while the turn runs: the executor records the failure.
    failing = feishu_server.api.fail(
        "set_streaming", None, times=None, when=lambda kw: kw["enabled"] is False
    )
    answer = "An answer whose card cannot be closed for a while, slowly enough for the card to open."
    await start_worker(ScriptedProvider([script_text(answer)], delay=0.1))
    user = await ask(feishu, feishu_server, "hello")
    for _ in range(400):
        if await failures():
            break
        await asyncio.sleep(0.05)
    assert await failures() and (await row(user)).final_delivered_at is None
    failing.times = 0  # the platform recovers
    feishu.settled_ms = 0
    await asyncio.sleep(0.01)
    await feishu.scan_once()
    await delivered(user)
    from delivery.models import DeliveryFailure

    open_rows = await database_sync_to_async(DeliveryFailure.objects.filter(resolved_at__isnull=True).count)()
    assert open_rows == 0
    (bot,) = feishu_server.api.bot_messages(CHAT)
    assert bot.text == answer and not feishu_server.api.is_streaming(bot.card_id)
