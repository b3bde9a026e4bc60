"""OutboundDispatcher: per-chat order, bounded queues, bounded retries, owned lanes."""

from __future__ import annotations

import asyncio

import pytest

from delivery.outbound import (
    OutboundDispatcher,
    OutboundMessage,
    OutboundNotSentError,
    OutboundRefusedError,
    OutboundStatus,
)
from delivery.sinks import SinkError

FAST = {"retry_delays": (0.0,), "timeout": 1.0}


class RecordingSender:
    """Records sent texts; ``errors`` scripts successive outcomes; ``gates`` per chat stall sends."""

    def __init__(self, errors: list[BaseException | None] | None = None) -> None:
        self.errors = list(errors or [])
        self.calls: list[tuple[str, str]] = []
        self.sent: list[tuple[str, str]] = []
        self.gates: dict[str, asyncio.Event] = {}

    async def __call__(self, message: OutboundMessage) -> None:
        self.calls.append((message.chat_id, message.text))
        gate = self.gates.get(message.chat_id)
        if gate is not None:
            await gate.wait()
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error
        self.sent.append((message.chat_id, message.text))


def msg(chat: str, text: str, channel: str = "cli_chat") -> OutboundMessage:
    return OutboundMessage(channel, chat, text)


async def test_messages_of_one_chat_are_sent_in_submission_order():
    sender = RecordingSender()
    dispatcher = OutboundDispatcher({"cli_chat": sender}, **FAST)
    futures = [dispatcher.submit(msg("a", str(i))) for i in range(20)]
    results = await asyncio.gather(*futures)
    assert all(r.ok and r.attempts == 1 for r in results)
    assert sender.sent == [("a", str(i)) for i in range(20)]
    await dispatcher.close()


async def test_a_stalled_chat_does_not_delay_another_chat():
    sender = RecordingSender()
    sender.gates["slow"] = asyncio.Event()
    dispatcher = OutboundDispatcher({"cli_chat": sender}, **FAST)
    slow = dispatcher.submit(msg("slow", "1"))
    fast = await asyncio.wait_for(dispatcher.deliver(msg("fast", "2")), 2)
    assert fast.ok and not slow.done()
    sender.gates["slow"].set()
    assert (await slow).ok
    assert sender.sent == [("fast", "2"), ("slow", "1")]
    await dispatcher.close()


async def test_failures_that_say_nothing_was_sent_are_retried_a_bounded_number_of_times():
    sender = RecordingSender([OutboundNotSentError("refused"), None])
    dispatcher = OutboundDispatcher({"cli_chat": sender}, attempts=3, **FAST)
    result = await dispatcher.deliver(msg("a", "x"))
    assert (result.ok, result.status, result.attempts) == (True, OutboundStatus.SENT, 2)

    sender.errors = [OutboundNotSentError("refused")] * 5
    result = await dispatcher.deliver(msg("a", "y"))
    assert (result.ok, result.status, result.attempts) == (False, OutboundStatus.NOT_SENT, 3)
    assert result.error == "OutboundNotSentError: refused" and not result.permanent
    assert [c for c in sender.calls if c[1] == "y"] == [("a", "y")] * 3
    await dispatcher.close()


async def test_a_permanent_error_is_not_retried():
    sender = RecordingSender([SinkError("chat deleted", permanent=True)])
    dispatcher = OutboundDispatcher({"cli_chat": sender}, **FAST)
    result = await dispatcher.deliver(msg("a", "x"))
    assert (result.ok, result.status, result.attempts, result.permanent) == (
        False,
        OutboundStatus.NOT_SENT,
        1,
        True,
    )
    await dispatcher.close()


class PublishThenStall:
    """A sender that publishes the message, then hangs (a layer that never acknowledges)."""

    def __init__(self, idempotent: bool = False) -> None:
        self.idempotent = idempotent
        self.published: list[OutboundMessage] = []

    async def __call__(self, message: OutboundMessage) -> None:
        self.published.append(message)
        await asyncio.Event().wait()


async def test_a_send_that_published_then_timed_out_is_not_sent_again_and_is_not_reported_lost():
    sender = PublishThenStall()
    dispatcher = OutboundDispatcher({"cli_chat": sender}, attempts=3, timeout=0.01, retry_delays=(0.0,))
    result = await dispatcher.deliver(msg("a", "x"))
    assert len(sender.published) == 1, "at most once: a timeout may come after the publish"
    assert result.status is OutboundStatus.UNKNOWN and result.ok is None
    assert result.attempts == 1 and "timed out" in result.error
    await dispatcher.close()


async def test_an_ambiguous_error_of_a_non_idempotent_sender_is_not_retried():
    sender = RecordingSender([ConnectionError("reset mid-publish"), None])
    dispatcher = OutboundDispatcher({"cli_chat": sender}, attempts=3, **FAST)
    result = await dispatcher.deliver(msg("a", "x"))
    assert (result.ok, result.status, result.attempts) == (None, OutboundStatus.UNKNOWN, 1)
    assert sender.calls == [("a", "x")]
    await dispatcher.close()


async def test_an_idempotent_sender_is_retried_with_the_same_key_after_a_timeout():
    sender = PublishThenStall(idempotent=True)
    dispatcher = OutboundDispatcher({"cli_chat": sender}, attempts=3, timeout=0.01, retry_delays=(0.0,))
    result = await dispatcher.deliver(msg("a", "x"))
    assert len(sender.published) == 3
    assert len({m.id for m in sender.published}) == 1, "every copy carries one idempotency key"
    assert result.status is OutboundStatus.UNKNOWN and result.attempts == 3

    flaky = RecordingSender([TimeoutError(), None])
    flaky.idempotent = True
    dispatcher = OutboundDispatcher({"cli_chat": flaky}, attempts=3, **FAST)
    assert (await dispatcher.deliver(msg("a", "y"))).ok is True
    await dispatcher.close()


async def test_a_permanent_error_after_an_ambiguous_attempt_stays_unknown():
    sender = RecordingSender([ConnectionError("reset"), SinkError("chat deleted", permanent=True)])
    sender.idempotent = True
    dispatcher = OutboundDispatcher({"cli_chat": sender}, attempts=3, **FAST)
    result = await dispatcher.deliver(msg("a", "x"))
    assert (result.status, result.attempts, result.permanent) == (OutboundStatus.UNKNOWN, 2, False)
    await dispatcher.close()


def test_every_message_has_its_own_idempotency_key_unless_given():
    assert msg("a", "x").id != msg("a", "x").id
    assert OutboundMessage("cli_chat", "a", "x", id="k").id == "k"


async def test_an_unknown_channel_fails_without_a_send():
    dispatcher = OutboundDispatcher({"cli_chat": RecordingSender()}, **FAST)
    result = await dispatcher.deliver(msg("a", "x", channel="fax"))
    assert not result.ok and result.attempts == 0 and "fax" in result.error
    await dispatcher.close()


async def test_a_full_lane_refuses_instead_of_growing():
    sender = RecordingSender()
    sender.gates["a"] = asyncio.Event()
    dispatcher = OutboundDispatcher({"cli_chat": sender}, queue_size=2, **FAST)
    first = dispatcher.submit(msg("a", "0"))
    await asyncio.sleep(0)  # the lane takes the first one and stalls on it
    queued = [dispatcher.submit(msg("a", str(i))) for i in (1, 2)]
    with pytest.raises(OutboundRefusedError):
        dispatcher.submit(msg("a", "3"))
    refused = await dispatcher.deliver(msg("a", "4"))
    assert refused.ok is False and refused.attempts == 0
    dispatcher.submit(msg("b", "other chats are not affected"))
    sender.gates["a"].set()
    assert all(r.ok for r in await asyncio.gather(first, *queued))
    await dispatcher.close()


async def test_idle_lanes_end_and_a_new_message_starts_a_new_one():
    sender = RecordingSender()
    dispatcher = OutboundDispatcher({"cli_chat": sender}, idle_timeout=0.01, **FAST)
    assert (await dispatcher.deliver(msg("a", "1"))).ok
    assert dispatcher.lane_count == 1
    async with asyncio.timeout(2):
        while dispatcher.lane_count:  # noqa: ASYNC110 - waiting for the lane's own idle timer
            await asyncio.sleep(0.01)
    assert (await dispatcher.deliver(msg("a", "2"))).ok
    assert sender.sent == [("a", "1"), ("a", "2")]
    await dispatcher.close()


async def test_close_sends_what_is_queued_then_refuses():
    sender = RecordingSender()
    dispatcher = OutboundDispatcher({"cli_chat": sender}, **FAST)
    futures = [dispatcher.submit(msg("a", str(i))) for i in range(3)]
    await dispatcher.close(timeout=2)
    assert all(f.done() and f.result().ok for f in futures)
    assert dispatcher.lane_count == 0
    with pytest.raises(OutboundRefusedError):
        dispatcher.submit(msg("a", "late"))


async def test_close_cancels_a_hung_lane_and_fails_its_messages():
    sender = RecordingSender()
    sender.gates["a"] = asyncio.Event()  # never set
    dispatcher = OutboundDispatcher({"cli_chat": sender}, timeout=60, retry_delays=(0.0,))
    futures = [dispatcher.submit(msg("a", str(i))) for i in range(2)]
    await asyncio.sleep(0)
    await dispatcher.close(timeout=0.01)
    results = [f.result() for f in futures]
    # The first one was in the sender when the lane was cancelled: it may have gone out.
    assert [r.status for r in results] == [OutboundStatus.UNKNOWN, OutboundStatus.NOT_SENT]
    assert [r.ok for r in results] == [None, False]
    assert results[1].error == "dispatcher closed"
    assert dispatcher.lane_count == 0


def test_limits_must_be_positive():
    with pytest.raises(ValueError):
        OutboundDispatcher({}, queue_size=0)
    with pytest.raises(ValueError):
        OutboundDispatcher({}, attempts=0)
