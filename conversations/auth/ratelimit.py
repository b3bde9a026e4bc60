"""Sliding-window rate limits, pure (no Django): failed sign-ins per address, messages per user.

``SlidingWindowLimiter(limit, window)`` remembers, per key, the times of the last ``limit``
events; a key is *blocked* while ``limit`` of them fall within the last ``window`` seconds, until
the oldest of those leaves the window. Memory is bounded: at most ``max_keys`` keys (the least
recently used is forgotten first), each with at most ``limit`` times. Times are the caller's
monotonic seconds (``time.monotonic()``), so tests pass their own clock. Not thread-safe: one
limiter lives on one event loop (issue 16 "Authentication hardening", "Limits everywhere").
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable


class SlidingWindowLimiter:
    """At most ``limit`` events per key within any ``window`` seconds.

    Args:
        limit: events allowed within one window (``0``: no limit at all, nothing is kept).
        window: the window's length in seconds.
        max_keys: how many keys are remembered (the least recently used is dropped beyond it).
    """

    def __init__(self, limit: int, window: float, *, max_keys: int = 100_000) -> None:
        if limit < 0 or window <= 0 or max_keys < 1:
            raise ValueError("limit ≥ 0, window > 0 and max_keys ≥ 1")
        self.limit = limit
        self.window = window
        self.max_keys = max_keys
        self._events: OrderedDict[Hashable, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        """How many keys are remembered now."""
        return len(self._events)

    def retry_after(self, key: Hashable, now: float) -> int | None:
        """Whole seconds (≥ 1) until ``key`` may act again, or None when it may act now."""
        if self.limit == 0:
            return None
        events = self._events.get(key)
        if events is None or len(events) < self.limit:
            return None
        wait = events[0] + self.window - now
        if wait <= 0:
            return None
        return max(1, math.ceil(wait))

    def record(self, key: Hashable, now: float) -> None:
        """Count one event of ``key`` at ``now`` (a failed sign-in, an accepted message)."""
        if self.limit == 0:
            return
        events = self._events.get(key)
        if events is None:
            events = self._events[key] = deque(maxlen=self.limit)
            if len(self._events) > self.max_keys:
                self._events.popitem(last=False)
        else:
            self._events.move_to_end(key)
        events.append(now)

    def take(self, key: Hashable, now: float) -> int | None:
        """Count an event of ``key`` unless it is blocked: None when counted, else the whole
        seconds to wait (nothing counted then)."""
        wait = self.retry_after(key, now)
        if wait is None:
            self.record(key, now)
        return wait

    def forget(self, key: Hashable) -> None:
        """Drop what is remembered of ``key`` (e.g. after a successful sign-in)."""
        self._events.pop(key, None)
