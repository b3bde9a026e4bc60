from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delivery.flow import SnapshotCreditWindow


def offer(w: SnapshotCreditWindow, rev: int, terminal: bool = False, turn: str = "t") -> list:
    return w.offer(turn, rev, terminal, f"{turn}:{rev}")


def test_a_slow_client_gets_four_snapshots_and_one_newest_pending():
    w = SnapshotCreditWindow()
    sent = [p for rev in range(1, 21) for p in offer(w, rev)]
    assert sent == ["t:1", "t:2", "t:3", "t:4"]
    assert w.unacked("t") == 4 and w.has_pending("t")
    assert w.seen("t", 1) == ["t:20"], "credit returns: only the newest pending goes out"
    assert w.seen("t", 2) == []
    assert offer(w, 21) == ["t:21"]


def test_terminal_snapshots_go_out_at_once_and_drop_the_pending_one():
    w = SnapshotCreditWindow(limit=2)
    offer(w, 1), offer(w, 2), offer(w, 3)
    assert w.has_pending("t")
    assert offer(w, 4, terminal=True) == ["t:4"]
    assert w.seen("t", 4) == []
    assert offer(w, 5) == [] and offer(w, 3) == []


def test_stale_and_duplicate_revisions_are_never_sent():
    w = SnapshotCreditWindow()
    assert offer(w, 5) == ["t:5"]
    assert offer(w, 5) == []
    assert offer(w, 3) == []
    assert offer(w, 2, terminal=True) == []


def test_an_older_snapshot_does_not_replace_a_newer_pending_one():
    w = SnapshotCreditWindow(limit=1)
    offer(w, 1), offer(w, 9)
    assert offer(w, 4) == []
    assert w.seen("t", 1) == ["t:9"]


def test_a_client_that_never_sends_seen_still_gets_every_terminal_snapshot():
    w = SnapshotCreditWindow()
    for turn in ("a", "b"):
        for rev in range(10):
            offer(w, rev, turn=turn)
        assert offer(w, 10, terminal=True, turn=turn) == [f"{turn}:10"]


def test_turns_have_independent_windows_and_forget_drops_state():
    w = SnapshotCreditWindow(limit=1)
    assert offer(w, 1, turn="a") == ["a:1"]
    assert offer(w, 1, turn="b") == ["b:1"]
    offer(w, 2, turn="a")
    w.forget("a")
    assert w.unacked("a") == 0 and not w.has_pending("a")
    assert w.seen("a", 5) == []


def test_the_number_of_tracked_running_turns_is_bounded():
    w = SnapshotCreditWindow(max_turns=3)
    for i in range(10):
        offer(w, 1, turn=f"t{i}")
    assert len(w._turns) == 3


def test_outstanding_counts_unacknowledged_plus_pending_and_remembers_its_peak():
    w = SnapshotCreditWindow(limit=2)
    for rev in range(1, 6):
        w.offer("t", rev, False, rev)
    assert (w.unacked("t"), w.has_pending("t"), w.outstanding("t")) == (2, True, 3)
    assert w.seen("t", 2) == [5]
    assert w.outstanding("t") == 1
    w.offer("t", 6, True, 6)
    assert w.outstanding("t") == 0 and w.outstanding("unknown") == 0
    assert w.peak_outstanding == 3


def test_limit_must_be_positive():
    with pytest.raises(ValueError):
        SnapshotCreditWindow(limit=0)


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("offer"), st.sampled_from("ab"), st.integers(0, 40), st.sampled_from([False] * 9 + [True])
        ),
        st.tuples(st.just("seen"), st.sampled_from("ab"), st.integers(0, 40)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5), ops)
def test_window_invariants_hold_for_any_offer_and_seen_sequence(limit, script):
    w = SnapshotCreditWindow(limit=limit)
    sent: dict[str, list[tuple[int, bool]]] = {"a": [], "b": []}
    acked = {"a": -1, "b": -1}
    offered_running = {"a": -1, "b": -1}

    def record(turn: str, payloads: list) -> None:
        for p_turn, rev, terminal in payloads:
            assert p_turn == turn
            if sent[turn]:
                last_rev, last_terminal = sent[turn][-1]
                assert rev > last_rev, "never a revision regression"
                assert not last_terminal, "nothing after the terminal snapshot"
            sent[turn].append((rev, terminal))

    for op in script:
        if op[0] == "offer":
            _, turn, rev, terminal = op
            done = any(t for _, t in sent[turn])
            newest = max((r for r, _ in sent[turn]), default=-1)
            out = w.offer(turn, rev, terminal, (turn, rev, terminal))
            if terminal and not done and rev > newest:
                assert out == [(turn, rev, True)], "terminal snapshots always go out at once"
            if not terminal and not done:
                offered_running[turn] = max(offered_running[turn], rev)
            record(turn, out)
        else:
            _, turn, rev = op
            acked[turn] = max(acked[turn], rev)
            record(turn, w.seen(turn, rev))
        for turn in "ab":
            unacked = [r for r, t in sent[turn] if not t and r > acked[turn]]
            assert len(unacked) <= limit
            assert w.unacked(turn) <= limit
            assert w.outstanding(turn) <= limit + 1
    assert w.peak_outstanding <= limit + 1

    for turn in "ab":
        if any(t for _, t in sent[turn]):
            continue
        # Once the client catches up, it has the newest running snapshot ever offered.
        record(turn, w.seen(turn, 10**9))
        if offered_running[turn] >= 0:
            assert sent[turn][-1][0] == offered_running[turn]
