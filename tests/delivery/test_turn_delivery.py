"""TurnDelivery: the delivery handle and its exactly-one plain fallback (seed 000 §5.3)."""

from __future__ import annotations

import asyncio
import json

from delivery.events import ReasoningDelta, TextDelta
from delivery.outbound import OutboundDispatcher, OutboundMessage, OutboundNotSentError
from delivery.presentation import PresentationPolicy
from delivery.sinks import FinalOnly, SinkError, SinkNotModified, Snapshot
from delivery.testing import RecordingSink
from delivery.turn import TurnController
from delivery.turn_delivery import NO_ANSWER_TEXT, TurnDelivery, fallback_id, fallback_message

FAST = {"retry_delays": (0.0,), "finish_timeout": 1.0}


class Outbox:
    """A recording outbound sender and its dispatcher."""

    def __init__(self, errors: list[BaseException] | None = None) -> None:
        self.errors = list(errors or [])
        self.messages: list[OutboundMessage] = []
        self.dispatcher = OutboundDispatcher({"cli_chat": self.send}, retry_delays=(0.0,), timeout=1.0)

    async def send(self, message: OutboundMessage) -> None:
        if self.errors:
            raise self.errors.pop(0)
        self.messages.append(message)


def turn() -> TurnController:
    return TurnController("t1", "cli_chat:u:d", "m1")


async def start(
    c: TurnController, sink: RecordingSink | Exception, outbox: Outbox, **options
) -> TurnDelivery:
    async def open_sink():
        if isinstance(sink, Exception):
            raise sink
        return sink

    return await TurnDelivery.open(
        c,
        open_sink,
        PresentationPolicy.websocket(),
        outbox.dispatcher,
        channel="cli_chat",
        chat_id="u",
        **{**FAST, **options},
    )


def answer(c: TurnController, text: str = "The answer.") -> None:
    c.apply(ReasoningDelta(0, "private thoughts"))
    for word in text.split(" "):
        c.apply(TextDelta(0, word + " "))


async def test_a_delivered_final_sends_nothing_more():
    c, outbox, sink = turn(), Outbox(), RecordingSink(Snapshot(0.0))
    delivery = await start(c, sink, outbox)
    answer(c)
    c.complete()
    outcome = await delivery.settle(timeout=2)
    assert outcome.delivered and outcome.fallback is None and outcome.failure is None
    assert outbox.messages == [] and len(sink.finishes) == 1


async def test_finish_failing_transiently_then_succeeding_sends_no_fallback():
    c, outbox = turn(), Outbox()
    sink = RecordingSink(FinalOnly(), finish_errors=[ConnectionError("blip"), TimeoutError()])
    delivery = await start(c, sink, outbox)
    answer(c)
    c.complete()
    outcome = await delivery.settle(timeout=2)
    assert outcome.delivered and outcome.failure is None
    assert len(sink.finishes) == 3 and outbox.messages == []


async def test_finish_failing_permanently_sends_exactly_one_plain_fallback_with_the_answer():
    c, outbox = turn(), Outbox()
    sink = RecordingSink(Snapshot(0.0), finish_errors=[ConnectionError("down")] * 10)
    delivery = await start(c, sink, outbox, finish_attempts=3)
    answer(c, "Forty two.")
    c.complete()
    outcome = await delivery.settle(timeout=2)
    again = await delivery.settle(timeout=2)
    assert again is outcome
    assert not outcome.delivered and outcome.fallback.ok
    assert (outcome.failure.stage, outcome.failure.attempts) == ("finish", 3)
    assert outcome.failure.error == "ConnectionError: down"
    [message] = outbox.messages
    assert (message.text, message.level, message.chat_id) == ("Forty two. ", "info", "u")
    assert message.session_id == "cli_chat:u:d" and message.turn_id == "t1"
    assert "private" not in message.text
    assert sink.closed


async def test_not_modified_is_delivered_not_a_failure():
    c, outbox = turn(), Outbox()
    sink = RecordingSink(Snapshot(0.0), finish_errors=[SinkNotModified("same card")])
    delivery = await start(c, sink, outbox)
    answer(c)
    c.complete()
    outcome = await delivery.settle(timeout=2)
    assert outcome.delivered and outcome.failure is None and outbox.messages == []


async def test_an_open_failure_delivers_final_only_from_the_start():
    c, outbox = turn(), Outbox()
    delivery = await start(c, ConnectionError("platform unreachable"), outbox)
    assert not delivery.live
    answer(c, "Plain final.")
    c.complete()
    outcome = await delivery.settle(timeout=2)
    [message] = outbox.messages
    assert message.text == "Plain final. "
    assert outcome.failure.stage == "open" and outcome.failure.attempts == 0
    assert "platform unreachable" in outcome.failure.error


async def test_a_persistence_failure_never_sends_the_text_as_a_completed_answer():
    c, outbox = turn(), Outbox()
    sink = RecordingSink(Snapshot(0.0), finish_errors=[SinkError("gone", permanent=True)])
    delivery = await start(c, sink, outbox)
    answer(c, "Text shown before the commit failed.")
    c.begin_finalizing()
    c.fail("The answer could not be saved (ref ab12).")
    outcome = await delivery.settle(timeout=2)
    [message] = outbox.messages
    assert message.level == "error"
    assert "could not be saved" in message.text
    assert "Text shown before" not in message.text, "a failed turn never resends the body"
    assert outcome.failure.stage == "finish"


async def test_a_cancelled_turn_never_resends_the_body():
    c, outbox = turn(), Outbox()
    sink = RecordingSink(FinalOnly(), finish_errors=[SinkError("gone", permanent=True)])
    delivery = await start(c, sink, outbox)
    answer(c, "Partial words")
    c.cancel("stopped")
    await delivery.settle(timeout=2)
    [message] = outbox.messages
    assert message.level == "warning" and "stopped" in message.text and "Partial" not in message.text


def test_fallback_messages_per_terminal_status():
    done = turn()
    done.complete()
    assert fallback_message(done.snapshot()) == ("info", NO_ANSWER_TEXT)
    silent = turn()
    silent.apply(ReasoningDelta(0, "only thinking"))
    silent.cancel("stopped")
    assert fallback_message(silent.snapshot()) is None, "nothing was shown: nothing to summarise"
    failed = turn()
    failed.fail("The model provider failed")
    level, text = fallback_message(failed.snapshot())
    assert level == "error" and "provider failed" in text


async def test_a_cancelled_turn_is_finished_once_and_needs_no_fallback():
    c, outbox = turn(), Outbox()
    sink = RecordingSink(Snapshot(0.0))
    delivery = await start(c, sink, outbox)
    answer(c)
    c.cancel("the server is shutting down")
    c.cancel("stopped")  # a second stop after the first: no second terminal
    outcome = await delivery.settle(timeout=2)
    await delivery.settle(timeout=2)
    delivery.cancel()
    assert outcome.delivered and outbox.messages == []
    assert [json.loads(p)["status"] for _, p in sink.finishes] == ["cancelled"]
    assert all(json.loads(p)["status"] == "running" for _, p in sink.updates)


async def test_a_hung_finish_at_shutdown_ends_in_one_fallback_and_no_late_terminal():
    c, outbox = turn(), Outbox()
    sink = RecordingSink(FinalOnly())
    sink.finish_gate = asyncio.Event()  # the platform never answers
    delivery = await start(c, sink, outbox, finish_timeout=60)
    answer(c, "Late.")
    c.complete()
    outcome = await delivery.settle(timeout=0.05)
    assert len(outbox.messages) == 1 and outcome.failure.stage == "finish"
    assert "timed out" in outcome.failure.error
    sink.finish_gate.set()
    await asyncio.sleep(0.01)
    assert sink.delivered == [], "the abandoned finish cannot land after the fallback"
    assert sink.closed


async def test_tearing_down_a_running_delivery_sends_nothing():
    c, outbox = turn(), Outbox()
    sink = RecordingSink(Snapshot(0.0))
    delivery = await start(c, sink, outbox)
    answer(c)
    delivery.cancel()
    async with asyncio.timeout(2):
        while not sink.closed:  # noqa: ASYNC110 - the fake exposes a counter, not an event
            await asyncio.sleep(0.001)
    assert sink.finishes == [] and outbox.messages == []


async def test_a_failed_fallback_is_reported_as_the_fallback_stage():
    c, outbox = turn(), Outbox(errors=[OutboundNotSentError("layer down")] * 3)
    sink = RecordingSink(FinalOnly(), finish_errors=[SinkError("gone", permanent=True)])
    delivery = await start(c, sink, outbox)
    answer(c)
    c.complete()
    outcome = await delivery.settle(timeout=2)
    assert outcome.fallback.ok is False and outcome.fallback.attempts == 3
    assert outcome.failure.stage == "fallback"
    assert outcome.failure.error == "finish: SinkError: gone; fallback: OutboundNotSentError: layer down"
    assert outbox.messages == []


async def test_a_fallback_that_published_then_stalled_is_sent_once_and_not_reported_lost():
    published: list[OutboundMessage] = []

    async def publish_then_stall(message: OutboundMessage) -> None:
        published.append(message)
        await asyncio.Event().wait()

    c = turn()
    outbox = Outbox()
    outbox.dispatcher = OutboundDispatcher(
        {"cli_chat": publish_then_stall}, attempts=3, timeout=0.01, retry_delays=(0.0,)
    )
    sink = RecordingSink(FinalOnly(), finish_errors=[SinkError("gone", permanent=True)])
    delivery = await start(c, sink, outbox)
    answer(c, "Forty two.")
    c.complete()
    outcome = await delivery.settle(timeout=2)
    assert [m.text for m in published] == ["Forty two. "], "exactly one copy"
    assert published[0].id == fallback_id("t1")
    assert outcome.fallback.ok is None, "it may have arrived: not reported as lost"
    assert outcome.failure.stage == "finish", "not the 'user got nothing' stage"
    assert "fallback outcome unknown" in outcome.failure.error
    assert (await delivery.settle(timeout=2)) is outcome and len(published) == 1
    await outbox.dispatcher.close()


async def test_the_fallback_text_is_the_answer_as_history_commits_it():
    c, outbox = turn(), Outbox()
    sink = RecordingSink(FinalOnly(), finish_errors=[SinkError("gone", permanent=True)])
    delivery = await TurnDelivery.open(
        c,
        _opener(sink),
        PresentationPolicy.external(),
        outbox.dispatcher,
        channel="cli_chat",
        chat_id="u",
        **FAST,
    )
    c.apply(TextDelta(0, "The answer is "))
    c.apply(ReasoningDelta(0, "let me double-check"))
    c.apply(TextDelta(0, "42."))
    c.complete()
    await delivery.settle(timeout=2)
    [message] = outbox.messages
    assert message.text == "The answer is 42.", "one assistant message per run, as in history"
    assert [b["text"] for b in sink.finishes[0][0].blocks] == ["The answer is 42."]


def _opener(sink):
    async def open_sink():
        return sink

    return open_sink


async def test_a_stale_turn_sends_no_fallback_and_records_nothing():
    c, outbox = turn(), Outbox()
    sink = RecordingSink(Snapshot(0.0))

    async def open_sink():
        return sink

    delivery = await TurnDelivery.open(
        c,
        open_sink,
        PresentationPolicy.websocket(),
        outbox.dispatcher,
        channel="cli_chat",
        chat_id="u",
        is_current=lambda: False,
    )
    answer(c)
    c.complete()
    outcome = await delivery.settle(timeout=2)
    assert (outcome.delivered, outcome.fallback, outcome.failure) == (False, None, None)
    assert outbox.messages == [] and sink.finishes == []
