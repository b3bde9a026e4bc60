"""FeishuTurnSink against the fake Open API: one card, exactly one final, whatever fails."""

from __future__ import annotations

import dataclasses
import json

import pytest

from delivery.coordinator import DeliveryCoordinator
from delivery.events import TextDelta
from delivery.platforms.feishu.api import FeishuApiError, FeishuTransportError
from delivery.platforms.feishu.cards import CARD_TEXT_BUDGET, NO_ANSWER_TEXT, render_final, text_size
from delivery.platforms.feishu.sink import REENABLE_AFTER, CardState, FeishuTarget, FeishuTurnSink
from delivery.platforms.feishu.split import split_markdown_parts
from delivery.sinks import FinalOnly, SinkError, Snapshot

from .fake_api import FakeFeishuApi
from .turns import POLICY, SECRET, play, text_tool_text, turn, view

CHAT = "oc_chat"


class MemoryStore:
    """A CardStateStore that keeps what was saved, as the database would (plain dicts)."""

    def __init__(self) -> None:
        self.saved: dict[str, dict] = {}
        self.saves = 0

    async def save(self, turn_id: str, state: CardState) -> None:
        self.saved[turn_id] = dataclasses.asdict(state)
        self.saves += 1


@pytest.fixture
def api() -> FakeFeishuApi:
    return FakeFeishuApi()


@pytest.fixture
def user(api) -> str:
    return api.user_message(CHAT, "question")


def make(api, reply_to, store=None, **options) -> FeishuTurnSink:
    options.setdefault("clock", api.clock)
    options.setdefault("sleep", api.clock.sleep)
    return FeishuTurnSink(api, FeishuTarget("t1", CHAT, reply_to), store or MemoryStore(), **options)


async def stream(sink, api, views) -> None:
    for v in views:
        await sink.update(v, "")
        api.clock.advance(0.5)


def finished(text: str = "The answer is 42."):
    c = turn()
    c.apply(TextDelta(0, text))
    c.complete()
    return view(c)


def running(text: str):
    c = turn()
    c.apply(TextDelta(0, text))
    return view(c)


# -- 1. a normal turn ---------------------------------------------------------------------------


async def test_a_text_tool_text_turn_is_one_card_replying_to_the_user_and_closed_at_the_end(api, user):
    sink = make(api, user)
    c = turn()
    views = text_tool_text(c)
    await stream(sink, api, views)
    c.complete()
    final = view(c)
    await sink.finish(final, "")

    bots = api.bot_messages(CHAT)
    assert len(bots) == 1 and bots[0].reply_to == user and bots[0].card_id is not None
    assert bots[0].text == render_final(final)
    assert not api.is_streaming(bots[0].card_id)
    # nothing before the first visible text; running updates show the blocks in order
    assert api.calls[0][0] == "create_card"
    assert api.calls[0][1]["card"]["body"]["elements"][0]["content"] == "Let me\n\n✍️ …"
    texts = [kw["text"] for _, kw in api.ops("stream_text")]
    assert "Let me look that up.\n\n⏳ `web_search`\n\n🔧 Running tools…" in texts
    assert texts[-1] == render_final(final)
    ordered = [t for t in texts if "The answer is 42." in t][0]
    assert ordered.index("look that up") < ordered.index("web_search") < ordered.index("The answer")
    assert api.ops("set_streaming")[-1][1]["enabled"] is False
    assert SECRET not in json.dumps(api.calls, ensure_ascii=False)
    sequences = [kw["sequence"] for op, kw in api.calls if op in ("stream_text", "set_streaming")]
    assert sequences == sorted(set(sequences))
    assert sink.state.final_delivered and sink.state.card_final


async def test_the_coordinator_drives_the_sink_to_one_closed_card(api, user):
    sink = make(api, user, min_interval=0.0)
    c = turn()
    handle = DeliveryCoordinator(c, sink, POLICY, retry_delays=(0.0,), max_bytes_per_second=1e12).start()
    await play(c)
    c.complete()
    result = await handle.wait(timeout=5)
    assert result.ok
    assert len(api.ops("create_card")) == 1 and len(api.ops("stream_text")) >= 3
    (bot,) = api.bot_messages(CHAT)
    assert bot.text == render_final(view(c)) and not api.is_streaming(bot.card_id)


async def test_nothing_is_sent_before_visible_content_and_unchanged_text_is_not_resent(api, user):
    sink = make(api, user)
    c = turn()
    views = text_tool_text(c)
    await sink.update(views[0], "")  # reasoning only
    assert api.calls == []
    await sink.update(views[1], "")
    await sink.update(views[1], "")
    assert [op for op, _ in api.calls] == ["create_card", "reply_message"]


async def test_without_streaming_only_the_final_goes_out_as_a_new_message(api, user):
    sink = make(api, user, streaming=False)
    assert isinstance(sink.live_policy, FinalOnly)
    assert isinstance(make(api, user, min_interval=0.7).live_policy, Snapshot)
    await sink.update(running("partial"), "")
    await sink.finish(finished(), "")
    (bot,) = api.bot_messages(CHAT)
    assert bot.card_id is None and bot.text == "The answer is 42." and bot.reply_to == user
    assert api.ops("reply_message")[0][1]["uuid"] == "t1:final"
    assert api.ops("reply_message")[0][1]["msg_type"] == "post"  # a message, not a card


# -- 2. the card never opens --------------------------------------------------------------------


@pytest.mark.parametrize(("op", "code"), [("create_card", 99991672), ("reply_message", 230099)])
async def test_a_failing_first_card_call_leaves_exactly_one_final_message(api, user, op, code):
    api.fail(op, code, times=None, when=lambda kw: kw.get("uuid") != "t1:final")
    sink = make(api, user)
    with pytest.raises(SinkError):
        await sink.update(running("Hello"), "")
    await sink.update(running("Hello there"), "")  # the card is given up: no more tries
    assert len(api.ops(op)) == 1
    await sink.finish(finished(), "")
    (bot,) = api.bot_messages(CHAT)
    assert bot.card_id is None and bot.text == "The answer is 42."


async def test_a_transient_card_failure_is_retried_on_the_next_update_with_the_same_uuid(api, user):
    api.fail("reply_message", None, applied=True)  # the card message exists, the answer was lost
    sink = make(api, user)
    with pytest.raises(FeishuTransportError):
        await sink.update(running("Hello"), "")
    await sink.update(running("Hello there"), "")
    await sink.finish(finished(), "")
    (bot,) = api.bot_messages(CHAT)
    assert bot.card_id is not None and bot.text == "The answer is 42."
    assert {kw["uuid"] for _, kw in api.ops("reply_message")} == {"t1:card"}


async def test_a_recalled_user_message_gets_the_card_in_the_chat_with_the_same_uuid(api, user):
    api.recall(user)
    sink = make(api, user)
    await sink.update(running("Hello"), "")
    await sink.finish(finished(), "")
    (bot,) = api.bot_messages(CHAT)
    assert bot.reply_to is None and bot.text == "The answer is 42."
    assert api.ops("send_message")[0][1]["uuid"] == "t1:card"


async def test_without_a_message_to_reply_to_the_card_goes_to_the_chat(api):
    sink = make(api, None)
    await sink.update(running("Hello"), "")
    await sink.finish(finished(), "")
    (bot,) = api.bot_messages(CHAT)
    assert bot.reply_to is None and bot.card_id is not None and bot.text == "The answer is 42."
    assert [op for op, _ in api.calls][:2] == ["create_card", "send_message"]


# -- 3. the card cannot take the final ----------------------------------------------------------


@pytest.mark.parametrize("code", [200850, 300309, 230031])
async def test_a_final_card_update_that_cannot_apply_goes_as_one_new_message(api, user, code):
    sink = make(api, user)
    await sink.update(running("Partial answer"), "")
    final = finished("Full answer.")
    api.fail("stream_text", code, times=None, when=lambda kw: kw["text"] == "Full answer.")
    await sink.finish(final, "")
    await sink.finish(final, "")  # a repeat changes nothing
    with_final = [m for m in api.bot_messages(CHAT) if m.text == "Full answer."]
    assert len(with_final) == 1 and with_final[0].card_id is None and with_final[0].reply_to == user
    card = [m for m in api.bot_messages(CHAT) if m.card_id is not None]
    assert card and card[0].text != "Full answer."
    assert sink.state.dead and sink.state.final_delivered
    if code != 230031:  # its streaming was switched on again before it died: switched off again
        assert not api.is_streaming(card[0].card_id)


async def test_a_close_answering_streaming_closed_counts_as_closed(api, user):
    sink = make(api, user)
    await sink.update(running("Partial"), "")
    api.fail("set_streaming", 300309, when=lambda kw: kw["enabled"] is False)
    await sink.finish(finished(), "")
    (bot,) = api.bot_messages(CHAT)
    assert bot.text == "The answer is 42." and sink.state.final_delivered


# -- 4. rate limits -----------------------------------------------------------------------------


async def test_rate_limits_skip_intermediate_updates_and_the_final_still_arrives_once(api, user):
    sink = make(api, user)
    await sink.update(running("a"), "")
    api.fail("stream_text", 99991400, http_status=429, retry_after=2.0)
    await sink.update(running("a b"), "")  # rate limited: remembered, not raised
    calls = len(api.calls)
    api.clock.advance(0.5)
    await sink.update(running("a b c"), "")
    api.clock.advance(0.5)
    await sink.update(running("a b c d"), "")
    assert len(api.calls) == calls  # skipped during the backoff
    api.clock.advance(1.5)
    await sink.update(running("a b c d e"), "")
    assert api.ops("stream_text")[-1][1]["text"].startswith("a b c d e")
    api.fail("stream_text", 230020, retry_after=1.0)
    await sink.finish(finished(), "")
    assert api.clock.sleeps == [1.0]
    (bot,) = api.bot_messages(CHAT)
    assert bot.text == "The answer is 42."


async def test_a_final_rate_limited_beyond_max_wait_raises_and_a_retry_delivers_it_once(api, user):
    sink = make(api, user, max_wait=3.0)
    api.fail("reply_message", 230020, retry_after=2.0, times=2)
    with pytest.raises(FeishuApiError):
        await sink.finish(finished(), "")
    await sink.finish(finished(), "")
    assert [m.text for m in api.bot_messages(CHAT)] == ["The answer is 42."]


# -- 5. a long answer ---------------------------------------------------------------------------


def long_answer() -> str:
    chunks, i = [], 0
    while sum(map(len, chunks)) < 40_000:
        i += 1
        chunks.append(f"## 第{i}节 🚀\n\n" + "汉字和 emoji 👩\u200d💻 e\u0301 " * 20 + "\n\n")
        chunks.append("```python\n" + "".join(f"print({j}, '🇫🇷')\n" for j in range(40 + i * 7)) + "```\n\n")
    return "".join(chunks)


async def test_a_forty_thousand_character_answer_goes_as_card_plus_follow_ups_losing_nothing(api, user):
    text = long_answer()
    assert len(text) >= 40_000
    sink = make(api, user)
    await sink.update(running(text[:30_000]), "")
    (card,) = api.bot_messages(CHAT)
    assert text_size(card.text) <= CARD_TEXT_BUDGET
    final = finished(text)
    await sink.finish(final, "")
    expected = split_markdown_parts(render_final(final), CARD_TEXT_BUDGET, text_size)
    assert len(expected) >= 3
    assert "".join(p.body for p in expected) == render_final(final)
    bots = api.bot_messages(CHAT)
    assert [m.text for m in bots] == [p.text for p in expected]
    assert bots[0].card_id is not None and all(m.card_id is None for m in bots[1:])
    assert all(m.reply_to == user for m in bots)
    uuids = [kw["uuid"] for _, kw in api.ops("reply_message")]
    assert uuids == ["t1:card"] + [f"t1:part{i}" for i in range(2, len(expected) + 1)]
    assert sink.state.parts_sent == len(expected) - 1


# -- 6. retries after a lost answer -------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "when"),
    [
        ("stream_text", None),
        ("set_streaming", lambda kw: kw["enabled"] is False),
        ("reply_message", lambda kw: kw["uuid"] == "t1:part2"),
        ("reply_message", lambda kw: kw["uuid"] == "t1:part3"),
    ],
)
async def test_finish_again_after_an_applied_but_lost_call_shows_one_final(api, user, op, when):
    text = long_answer()
    sink = make(api, user)
    await sink.update(running("start"), "")
    api.fail(op, None, applied=True, when=when)
    final = finished(text)
    with pytest.raises(FeishuTransportError):
        await sink.finish(final, "")
    await sink.finish(final, "")
    expected = [p.text for p in split_markdown_parts(render_final(final), CARD_TEXT_BUDGET, text_size)]
    assert [m.text for m in api.bot_messages(CHAT)] == expected
    assert not api.is_streaming(api.bot_messages(CHAT)[0].card_id)


async def test_finish_again_after_a_lost_final_message_reuses_its_uuid(api, user):
    sink = make(api, user, streaming=False)
    api.fail("reply_message", None, applied=True)
    with pytest.raises(FeishuTransportError):
        await sink.finish(finished(), "")
    await sink.finish(finished(), "")
    assert [m.text for m in api.bot_messages(CHAT)] == ["The answer is 42."]


async def test_the_coordinator_retrying_a_lost_final_shows_it_once(api, user):
    sink = make(api, user, min_interval=0.0)
    c = turn()
    handle = DeliveryCoordinator(c, sink, POLICY, retry_delays=(0.0,), max_bytes_per_second=1e12).start()
    await play(c)
    api.fail("stream_text", None, applied=True, when=lambda kw: "…" not in kw["text"])
    c.complete()
    result = await handle.wait(timeout=5)
    assert result.ok and result.attempts == 2
    (bot,) = api.bot_messages(CHAT)
    assert bot.text == render_final(view(c))


async def test_a_refusing_chat_is_a_permanent_sink_error(api, user):
    api.fail("reply_message", 230002, times=None)
    sink = make(api, user, streaming=False)
    with pytest.raises(SinkError) as info:
        await sink.finish(finished(), "")
    assert info.value.permanent


# -- 7. crash recovery --------------------------------------------------------------------------


async def test_a_sink_rebuilt_from_its_saved_state_finishes_on_the_existing_card(api, user):
    store = MemoryStore()
    first = make(api, user, store)
    await first.update(running("Partial"), "")
    await first.update(running("Partial answer"), "")
    del first  # the process died
    saved = store.saved["t1"]
    api.clock.advance(3600 * 2)  # long after: the message uuids have expired, streaming closed
    rebuilt = FeishuTurnSink(
        api,
        FeishuTarget("t1", CHAT, user),
        store,
        clock=lambda: 5.0,
        sleep=api.clock.sleep,
        state=CardState(**saved),
    )
    await rebuilt.deliver_final("Recovered final.")
    (bot,) = api.bot_messages(CHAT)
    assert bot.text == "Recovered final." and not api.is_streaming(bot.card_id)
    assert store.saved["t1"]["final_delivered"] is True
    again = FeishuTurnSink(api, FeishuTarget("t1", CHAT, user), store, state=CardState(**store.saved["t1"]))
    calls = len(api.calls)
    await again.deliver_final("Recovered final.")
    assert len(api.calls) == calls


async def test_a_rebuilt_sink_whose_saved_sequence_lags_jumps_past_it(api, user):
    store = MemoryStore()
    sink = make(api, user, store)
    await sink.update(running("a"), "")
    stale = dict(store.saved["t1"])
    await sink.update(running("a b"), "")
    await sink.update(running("a b c"), "")
    rebuilt = make(api, user, store, state=CardState(**stale))
    await rebuilt.deliver_final("done")
    assert [m.text for m in api.bot_messages(CHAT)] == ["done"]


# -- 8. the streaming window --------------------------------------------------------------------


async def test_streaming_is_re_enabled_before_its_ten_minutes_end(api, user):
    sink = make(api, user)
    await sink.update(running("a"), "")
    api.clock.advance(REENABLE_AFTER + 1)
    await sink.update(running("a b"), "")
    ops = [(op, kw.get("enabled")) for op, kw in api.calls[2:]]
    assert ops == [("set_streaming", True), ("stream_text", None)]
    api.clock.advance(60)
    await sink.update(running("a b c"), "")
    assert [op for op, _ in api.calls[4:]] == ["stream_text"]
    await sink.finish(finished(), "")
    assert [m.text for m in api.bot_messages(CHAT)] == ["The answer is 42."]


async def test_a_content_call_failing_with_streaming_closed_re_enables_once_and_retries(api, user):
    sink = make(api, user)
    await sink.update(running("a"), "")
    api.fail("stream_text", 300309)
    await sink.update(running("a b"), "")
    ops = [op for op, _ in api.calls[2:]]
    assert ops == ["stream_text", "set_streaming", "stream_text"]
    assert api.bot_messages(CHAT)[0].text.startswith("a b")


async def test_a_card_that_cannot_be_updated_gets_no_more_running_updates(api, user):
    sink = make(api, user)
    await sink.update(running("a"), "")
    api.fail("stream_text", 230031)
    with pytest.raises(SinkError):
        await sink.update(running("a b"), "")
    calls = len(api.calls)
    await sink.update(running("a b c"), "")
    assert len(api.calls) == calls and sink.state.dead


# -- 9. text the platform accepts ---------------------------------------------------------------


@pytest.mark.parametrize("answer", ["\ud83d", "x\udc00y", "  \n ", "\x00"])
async def test_lone_surrogates_and_blank_answers_never_make_an_invalid_element(api, user, answer):
    sink = make(api, user)
    c = turn()
    c.apply(TextDelta(0, answer))
    await sink.update(view(c), "")  # the fake refuses empty or unencodable content
    c.complete()
    await sink.finish(view(c), "")
    (bot,) = api.bot_messages(CHAT)
    assert bot.text.strip() and "\x00" not in bot.text
    bot.text.encode("utf-8")
    if not answer.strip():
        assert NO_ANSWER_TEXT in bot.text


async def test_deliver_final_with_a_blank_text_says_no_answer(api, user):
    sink = make(api, user)
    await sink.deliver_final("")
    assert [m.text for m in api.bot_messages(CHAT)] == [NO_ANSWER_TEXT]


async def test_the_first_final_text_is_the_one_every_later_attempt_delivers(api, user):
    store = MemoryStore()
    sink = make(api, user, store, streaming=False)
    api.fail("reply_message", None)
    with pytest.raises(FeishuTransportError):
        await sink.deliver_final("Rendered final with 🔧 `tool` ✓ and the answer.")
    rebuilt = FeishuTurnSink(api, FeishuTarget("t1", CHAT, user), store, state=CardState(**store.saved["t1"]))
    await rebuilt.deliver_final("The answer.")  # the plain fallback's shorter text
    (bot,) = api.bot_messages(CHAT)
    assert bot.text == "Rendered final with 🔧 `tool` ✓ and the answer."
