"""Context windows learned from providers' overflow errors, per model preset (pure; issue 17).

When a provider refuses a request as too long and states its window
(``ContextOverflowError.limit_tokens``), the window is remembered for the preset in this process:
the next turns of that preset fit their input to ``min(configured, learned)`` from the start
(``overflow_sizing.RequestSizing``), instead of paying a refused request each turn. The latest
stated window wins (a provider's newest word about itself); nothing is stored across restarts.
Thread-safe (a lock around a dict): the worker's turns run on one event loop, titles and tests may
come from other threads.
"""

from __future__ import annotations

import threading


class LearnedLimits:
    """Preset name → the context window, tokens, its provider last stated."""

    def __init__(self) -> None:
        self._windows: dict[str, int] = {}
        self._lock = threading.Lock()

    def window(self, preset: str) -> int | None:
        """The learned window of ``preset`` in tokens, or None when none was learned."""
        with self._lock:
            return self._windows.get(preset)

    def learn(self, preset: str, limit_tokens: int) -> None:
        """Remember that ``preset``'s provider stated a window of ``limit_tokens`` tokens.

        An unnamed preset (``""``: a builder outside a worker's turn) or a non-positive window
        is not remembered.
        """
        if not preset or limit_tokens <= 0:
            return
        with self._lock:
            self._windows[preset] = int(limit_tokens)

    def clear(self) -> None:
        """Forget every learned window (tests; a process that swapped its providers)."""
        with self._lock:
            self._windows.clear()


LEARNED_LIMITS = LearnedLimits()
"""The process's store: what every turn's ``RequestSizing`` reads and teaches by default."""
