"""The pure sliding-window limiter (``conversations.auth.ratelimit``; issue 16)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conversations.auth.ratelimit import SlidingWindowLimiter


def test_the_event_past_the_limit_is_refused_until_the_oldest_leaves_the_window():
    limiter = SlidingWindowLimiter(3, 60)
    assert [limiter.take("a", t) for t in (0.0, 1.0, 2.0)] == [None, None, None]
    assert limiter.take("a", 10.0) == 50, "the oldest (t=0) leaves the window at t=60"
    assert limiter.take("a", 59.5) == 1, "a part of a second is a whole one"
    assert limiter.take("a", 60.0) is None
    assert limiter.retry_after("a", 60.0) == 1, "now t=1, 2 and 60 are in the window"


def test_a_refused_event_is_not_counted():
    limiter = SlidingWindowLimiter(2, 10)
    limiter.take("a", 0.0)
    limiter.take("a", 5.0)
    for t in (6.0, 7.0, 8.0, 9.0):
        assert limiter.take("a", t) is not None
    assert limiter.take("a", 10.0) is None, "refusals did not push the window on"


def test_keys_are_counted_apart():
    limiter = SlidingWindowLimiter(1, 60)
    assert limiter.take("a", 0.0) is None
    assert limiter.take("a", 1.0) == 59
    assert limiter.take("b", 1.0) is None


def test_record_counts_without_asking_and_forget_clears():
    limiter = SlidingWindowLimiter(2, 60)
    limiter.record("addr", 0.0)
    assert limiter.retry_after("addr", 0.0) is None
    limiter.record("addr", 0.0)
    assert limiter.retry_after("addr", 30.0) == 30
    limiter.forget("addr")
    assert limiter.retry_after("addr", 30.0) is None


def test_a_zero_limit_limits_nothing_and_keeps_nothing():
    limiter = SlidingWindowLimiter(0, 60)
    assert all(limiter.take("a", float(t)) is None for t in range(100))
    assert len(limiter) == 0


def test_memory_is_bounded_by_max_keys_forgetting_the_least_recently_used():
    limiter = SlidingWindowLimiter(1, 60, max_keys=3)
    for key in ("a", "b", "c"):
        limiter.record(key, 0.0)
    limiter.record("a", 0.0)  # a is used again: b is now the least recent
    limiter.record("d", 0.0)
    assert len(limiter) == 3
    assert limiter.retry_after("b", 1.0) is None, "b was forgotten"
    assert limiter.retry_after("a", 1.0) == 59


@pytest.mark.parametrize("args", [(-1, 60), (1, 0), (1, -5)])
def test_nonsense_bounds_are_refused(args):
    with pytest.raises(ValueError):
        SlidingWindowLimiter(*args)


@given(
    limit=st.integers(1, 6),
    window=st.floats(0.5, 100),
    gaps=st.lists(st.floats(0, 50), max_size=60),
)
def test_never_more_than_limit_accepted_in_any_window(limit, window, gaps):
    limiter = SlidingWindowLimiter(limit, window)
    now, accepted = 0.0, []
    for gap in gaps:
        now += gap
        wait = limiter.take("k", now)
        if wait is None:
            accepted.append(now)
        else:
            assert wait >= 1
    for start in accepted:
        assert sum(1 for t in accepted if start <= t < start + window) <= limit
