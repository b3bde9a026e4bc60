"""``TurnCheckpointer``: one save per round of the turns that changed, never two in flight, and a
failed save that the turn never notices (``runtime.checkpoints``). Rounds are driven by hand; the
storage function is a fake, run on the real storage thread."""

from __future__ import annotations

import asyncio
import logging
import threading

from conversations.runtime.checkpoints import CheckpointSource, TurnCheckpointer, shown_checkpoint
from delivery.events import ReasoningDelta, TextDelta, ToolStarted
from delivery.turn import TurnController


def turn(turn_id: str = "t1") -> tuple[TurnController, CheckpointSource]:
    controller = TurnController(turn_id, "cli_chat:1:d", "m1")
    return controller, CheckpointSource("cli_chat:1:d", 3, f"inbox-{turn_id}", turn_id, controller.snapshot)


class FakeWrite:
    def __init__(self) -> None:
        self.calls: list[list] = []
        self.release = threading.Event()
        self.release.set()
        self.fail = False

    def __call__(self, worker_id: str, writes: list) -> int:
        assert worker_id == "w1"
        self.release.wait(5)
        if self.fail:
            raise RuntimeError("database is locked")
        self.calls.append(writes)
        return len(writes)


async def one_round(checkpointer: TurnCheckpointer) -> None:
    task = checkpointer.round()
    if task is not None:
        await task


def test_the_checkpoint_joins_every_shown_answer_and_reasoning_block_and_skips_tools():
    controller, source = turn()
    assert shown_checkpoint(source.snapshot()) is None
    controller.apply(ReasoningDelta(0, "think"))
    controller.apply(TextDelta(0, "word0 "))
    controller.apply(ToolStarted(0, "c1", "search", {}))
    controller.apply(TextDelta(1, "word1"))
    cp = shown_checkpoint(source.snapshot())
    assert (cp["text"], cp["reasoning"], cp["iteration"]) == ("word0 \n\nword1", "think", 1)
    assert cp["revision"] == controller.revision and cp["at"] > 0


async def test_a_round_saves_only_turns_whose_shown_text_changed():
    write = FakeWrite()
    (a, source_a), (b, source_b) = turn("a"), turn("b")
    sources = [source_a, source_b]
    checkpointer = TurnCheckpointer("w1", lambda: sources, 2.0, write=write)
    await one_round(checkpointer)
    assert write.calls == [], "nothing shown yet: nothing written"

    a.apply(TextDelta(0, "word0"))
    await one_round(checkpointer)
    assert [[w.inbox_id for w in call] for call in write.calls] == [["inbox-a"]]

    a.set_phase("acting")  # a new revision, the same text
    await one_round(checkpointer)
    assert len(write.calls) == 1

    a.apply(TextDelta(0, " word1"))
    b.apply(ReasoningDelta(0, "hm"))
    await one_round(checkpointer)
    assert [[(w.inbox_id, w.checkpoint["text"]) for w in call] for call in write.calls[1:]] == [
        [("inbox-a", "word0 word1"), ("inbox-b", "")]
    ], "both changed turns in ONE storage call"
    assert write.calls[1][0].epoch == 3


async def test_a_slow_save_makes_later_rounds_skip_instead_of_queueing():
    write = FakeWrite()
    controller, source = turn()
    checkpointer = TurnCheckpointer("w1", lambda: [source], 2.0, write=write)
    controller.apply(TextDelta(0, "word0"))
    write.release.clear()
    slow = checkpointer.round()
    assert slow is not None
    for n in range(3):
        controller.apply(TextDelta(0, f" word{n + 1}"))
        assert checkpointer.round() is None
    assert checkpointer.skipped_rounds == 3
    write.release.set()
    await slow
    await one_round(checkpointer)
    assert [call[0].checkpoint["text"] for call in write.calls] == ["word0", "word0 word1 word2 word3"]


async def test_a_failed_save_is_logged_and_retried_by_the_next_round(caplog):
    write = FakeWrite()
    controller, source = turn()
    checkpointer = TurnCheckpointer("w1", lambda: [source], 2.0, write=write)
    controller.apply(TextDelta(0, "word0"))
    write.fail = True
    with caplog.at_level(logging.WARNING, logger="conversations.runtime.checkpoints"):
        await one_round(checkpointer)
    assert "could not save 1 turn checkpoint(s): database is locked" in caplog.text
    assert controller.apply(TextDelta(0, " word1")), "the turn goes on"
    write.fail = False
    await one_round(checkpointer)
    assert [call[0].checkpoint["text"] for call in write.calls] == ["word0 word1"]


async def test_run_saves_once_per_period_and_close_awaits_the_save_in_flight():
    write = FakeWrite()
    controller, source = turn()
    controller.apply(TextDelta(0, "word0"))
    checkpointer = TurnCheckpointer("w1", lambda: [source], 0.05, write=write)
    task = asyncio.ensure_future(checkpointer.run())
    async with asyncio.timeout(5):
        while True:
            if write.calls:
                break
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    assert len(write.calls) == 1, "unchanged: no second save however many periods pass"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert checkpointer._in_flight is None
