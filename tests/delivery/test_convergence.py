"""ConvergenceLedger: which turns a connection still expects to see end (PROTOCOL §1)."""

from __future__ import annotations

from delivery.convergence import ConvergenceLedger, Due
from delivery.load import LoopLagGauge


def test_a_running_turn_becomes_due_only_after_it_was_quiet():
    ledger = ConvergenceLedger(5.0)
    assert ledger.saw_running("t1", now=0.0) is True
    assert not ledger.due(4.9)
    assert ledger.saw_running("t1", now=4.0) is False  # activity pushes it back
    assert not ledger.due(8.9)
    assert ledger.due(9.0) == Due((), ("t1",))


def test_a_turn_whose_end_frames_both_went_out_is_settled():
    ledger = ConvergenceLedger(5.0)
    ledger.saw_running("t1", 0.0)
    ledger.sent_terminal("t1")
    assert ledger and ledger.due(10.0) == Due((), ("t1",)), "turn_committed still missing"
    ledger.sent_committed("t1", "in-1")
    assert not ledger and ledger.next_due_in(10.0) is None
    assert ledger.saw_running("t1", 11.0) is False, "a late running copy does not revive it"


def test_an_acked_message_is_looked_up_by_its_inbox_id_and_bound_to_its_turn():
    ledger = ConvergenceLedger(5.0)
    assert ledger.expect_message("in-1", 0.0) is True
    assert ledger.expect_message("in-1", 1.0) is False
    assert ledger.due(5.0) == Due(("in-1",), ())
    ledger.still_running("in-1", "t1", now=5.0)  # the lookup found its turn running
    assert not ledger.due(14.9), "looked at again after a doubled quiet period"
    assert ledger.due(15.0) == Due((), ("t1",))
    ledger.sent_terminal("t1")
    ledger.sent_committed("t1", "in-1")
    assert not ledger


def test_a_snapshot_that_names_its_inbox_id_binds_the_ack_entry_so_a_streaming_turn_is_never_looked_up():
    ledger = ConvergenceLedger(5.0)
    ledger.expect_message("in-1", 0.0)
    assert ledger.saw_running("t1", 1.0, inbox_id="in-1") is False, (
        "no new entry: the ack's became the turn's"
    )
    assert len(ledger) == 1
    for now in (4.0, 8.0, 12.0):  # snapshots keep coming: nothing is ever due
        ledger.saw_running("t1", now, inbox_id="in-1")
        assert not ledger.due(now + 4.9)
    assert ledger.due(17.0) == Due((), ("t1",)), "quiet after its last snapshot: looked up by turn id"
    ledger.sent_terminal("t1")
    ledger.sent_committed("t1", "in-1")
    assert not ledger
    ledger.expect_message("in-2", 20.0)  # another connection's turn naming an unknown inbox id
    assert ledger.saw_running("t2", 20.0, inbox_id="in-9") is True and len(ledger) == 2


def test_the_ack_entry_and_the_snapshot_entry_of_one_turn_merge_when_turn_committed_names_both():
    ledger = ConvergenceLedger(5.0)
    ledger.expect_message("in-1", 0.0)
    ledger.saw_running("t1", 0.0)
    ledger.sent_terminal("t1")
    assert len(ledger) == 2
    ledger.sent_committed("t1", "in-1")
    assert not ledger, "one turn: both entries settled"


def test_quiet_periods_double_up_to_the_cap_for_a_long_running_turn():
    ledger = ConvergenceLedger(5.0, max_quiet_seconds=12.0)
    ledger.saw_running("t1", 0.0)
    waits = []
    now = 5.0
    for _ in range(4):
        ledger.still_running("", "t1", now)
        waits.append(ledger.next_due_in(now))
        now += waits[-1]
    assert waits == [10.0, 12.0, 12.0, 12.0]


def test_sent_end_frames_are_remembered_so_late_copies_are_dropped_and_the_memory_is_bounded():
    ledger = ConvergenceLedger(5.0, remember_sent=3)
    for i in range(5):
        ledger.sent_terminal(f"t{i}")
        ledger.sent_committed(f"t{i}", None)
    assert [ledger.terminal_sent(f"t{i}") for i in range(5)] == [False, False, True, True, True]
    assert ledger.committed_sent("t4") and not ledger.committed_sent("t0")


def test_the_ledger_keeps_at_most_max_expected_turns():
    ledger = ConvergenceLedger(5.0, max_expected=3)
    for i in range(5):
        ledger.saw_running(f"t{i}", float(i))
    assert len(ledger) == 3
    assert ledger.due(100.0) == Due((), ("t2", "t3", "t4")), "the oldest were dropped"


def test_forget_drops_a_turn_by_either_key():
    ledger = ConvergenceLedger(5.0)
    ledger.expect_message("in-1", 0.0)
    ledger.saw_running("t2", 0.0)
    ledger.forget(inbox_id="in-1")
    ledger.forget(turn_id="t2")
    assert not ledger


def test_lag_below_the_calm_level_keeps_the_base_interval_and_above_it_stretches_up_to_the_cap():
    gauge = LoopLagGauge(calm_lag=0.010, max_interval=1.0)
    assert gauge.pace(0.033) == 0.033
    gauge.sample(0.050)
    assert gauge.lag == 0.050 and abs(gauge.pace(0.033) - 0.165) < 1e-9
    gauge.sample(2.0)
    assert gauge.pace(0.033) == 1.0, "capped: latency stays bounded"


def test_lag_rises_at_once_and_decays_slowly():
    gauge = LoopLagGauge(decay=0.5)
    gauge.sample(0.4)
    gauge.sample(0.0)
    assert gauge.lag == 0.2
    gauge.sample(-1.0)  # a timer can fire early: never a negative lag
    assert gauge.lag == 0.1


def test_a_lookup_that_finds_the_turn_running_pushes_back_both_the_ack_and_the_snapshot_entry():
    ledger = ConvergenceLedger(5.0)
    ledger.expect_message("in-1", 0.0)  # the ack
    ledger.saw_running("t1", 4.0)  # its running snapshots
    assert ledger.due(5.0) == Due(("in-1",), ())
    ledger.still_running("in-1", "t1", now=5.0)
    assert not ledger.due(5.0) and len(ledger) == 1, "one entry, not due: no lookup loop"


def test_postpone_gives_every_key_still_due_after_its_lookup_a_quiet_period():
    ledger = ConvergenceLedger(5.0)
    ledger.saw_running("t1", 0.0)
    due = ledger.due(5.0)
    ledger.postpone(due, 5.0)  # the lookup said nothing about it (e.g. the row is gone)
    assert not ledger.due(9.9) and ledger.due(10.0) == Due((), ("t1",))
