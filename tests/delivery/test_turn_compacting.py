"""The ``compacting`` phase of a running turn (seed 002 §6d, PROTOCOL §1 ``phase``)."""

from __future__ import annotations

from delivery.events import TextDelta
from delivery.snapshot import TurnPhase, TurnStatus
from delivery.turn import TurnController


def make() -> TurnController:
    return TurnController("t1", "cli_chat:u1:d1", "m1")


def test_compacting_is_a_visible_phase_that_ends_in_responding():
    c = make()
    assert c.begin_compacting() is True
    snap = c.snapshot()
    assert (snap.phase, snap.revision, snap.status) == (TurnPhase.COMPACTING, 1, TurnStatus.RUNNING)
    assert snap.to_dict()["phase"] == "compacting"
    assert c.begin_compacting() is False  # already compacting: no new revision
    assert c.revision == 1
    assert c.end_compacting() is True
    assert (c.phase, c.revision) == (TurnPhase.RESPONDING, 2), "the request comes next: never back to queued"
    assert c.end_compacting() is False and c.revision == 2


def test_end_compacting_keeps_a_phase_set_meanwhile():
    c = make()
    c.begin_compacting()
    c.apply(TextDelta(0, "hi"))
    assert c.phase is TurnPhase.RESPONDING
    assert c.end_compacting() is False
    assert c.phase is TurnPhase.RESPONDING


def test_a_terminal_turn_ignores_compacting():
    c = make()
    c.begin_compacting()
    c.fail("it broke")
    revision = c.revision
    assert c.begin_compacting() is False and c.end_compacting() is False
    assert c.revision == revision and c.snapshot().status is TurnStatus.FAILED


def test_after_compacting_the_phase_goes_on_to_responding_not_back_to_queued():
    controller = TurnController("t1", "cli_chat:u1:d1", "m1")
    assert controller.begin_compacting() and controller.phase is TurnPhase.COMPACTING
    assert controller.end_compacting() and controller.phase is TurnPhase.RESPONDING
