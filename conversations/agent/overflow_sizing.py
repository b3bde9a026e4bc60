"""Requests sized from what the provider refused (pure; issue 17 "Overflow sized from the provider").

A request the provider refused as too long is sent once more sized relative to *what was
refused* — its estimate and the sizes the error stated (``ContextOverflowError.limit_tokens``,
``prompt_tokens``, ``output_tokens``) — never relative to a configured window that may be wrong:

* The error says input + output budget exceed the window and the input alone leaves room for at
  least :func:`output_floor`: the same input goes again with ``max_tokens`` = window − input −
  :func:`margin_tokens`.
* Otherwise, with a stated window, the input is refitted to window − output reserve − margin,
  converted to estimate units by estimate ÷ stated input when both are known (the estimator
  counts on the safe side; ``context/tokens.py``); the reserve is the output budget, at most a
  quarter of the window.
* Without a stated window (or when the stated sizes would not cut anything) the input is refitted
  to ``FALLBACK_SHARE`` of the refused request's estimate.

A stated window is kept for the rest of the turn and remembered for the preset
(``learned_limits``); while one is known every request's ``max_tokens`` is sized to what the
window leaves (:meth:`RequestSizing.output_budget`). Whether a retry is allowed at all (once per
turn, only before anything was shown) is the caller's rule: ``AgentLoop`` for later requests,
``context/overflow.py`` for the first one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from conversations.agent.learned_limits import LEARNED_LIMITS, LearnedLimits
from providers.errors import ContextOverflowError
from providers.messages import Message

log = logging.getLogger(__name__)

MIN_OUTPUT_TOKENS = 1024
"""The smallest output budget a retry gets by lowering ``max_tokens`` (a quarter of a smaller
window); below it the input is shrunk instead."""
FALLBACK_SHARE = 0.5
"""The share of the refused request's estimate the input is refitted to when the error states no
usable sizes (seed 000 §7.2: half)."""


def margin_tokens(limit_tokens: int) -> int:
    """Tokens kept free under a stated window (the provider's count of a request differs a little
    from the sizes it states: role markers, the reply primer): 2 %, at least 64."""
    return max(64, limit_tokens // 50)


def output_floor(limit_tokens: int) -> int:
    """The smallest output budget worth sending in a window of ``limit_tokens`` tokens."""
    return max(1, min(MIN_OUTPUT_TOKENS, limit_tokens // 4))


@dataclass(frozen=True)
class OverflowRetry:
    """How to send a refused request once more.

    Attributes:
        window: the window, in estimated tokens, the input is fitted to for the retry (its
            compaction share applies, as to the configured window); None: the same input again.
        max_tokens: the retry's output budget when ``window`` is None (the rest of the turn's
            requests get theirs from :meth:`RequestSizing.output_budget`), else None.
        limit_tokens: the window the provider stated, or None.
    """

    window: int | None
    max_tokens: int | None = None
    limit_tokens: int | None = None


class RequestFitter(Protocol):
    """Fits and sizes a turn's requests (``TurnInputBuilder``): what ``AgentLoop`` asks."""

    def fit(self, messages: list[Message], *, window: int | None = None) -> list[Message]:
        """A later request fitted to ``window`` estimated tokens (None: the turn's window)."""
        ...

    def output_budget(self, messages: list[Message]) -> int | None:
        """The ``max_tokens`` of a request of ``messages`` (None: the provider's configured one)."""
        ...

    def after_overflow(self, error: ContextOverflowError, refused: list[Message]) -> OverflowRetry:
        """How to send ``refused`` once more after the provider refused it with ``error``."""
        ...


class RequestSizing:
    """The window and output budget of one turn's requests, and their sizes after an overflow.

    Args:
        estimate: estimated tokens of a request of some messages (``TurnInputBuilder.estimate``).
        window_tokens: the preset's configured context window, tokens.
        output_tokens: the preset's output budget per request (``max_tokens``), or None when none
            is configured (the server's default then; an error that states it teaches it).
        preset: the turn's model preset ("" learns nothing).
        limits: the learned windows (default: the process's store).
    """

    def __init__(
        self,
        estimate: Callable[[Sequence[Message]], int],
        *,
        window_tokens: int,
        output_tokens: int | None = None,
        preset: str = "",
        limits: LearnedLimits = LEARNED_LIMITS,
    ) -> None:
        self.estimate = estimate
        self.window_tokens = max(1, int(window_tokens))
        self.output_tokens = output_tokens or None
        self.preset = preset
        self.limits = limits
        self.limit_tokens: int | None = limits.window(preset) if preset else None
        """The provider's stated window (this turn's error, or learned by an earlier turn)."""
        self._scale: tuple[int, int] | None = None  # (stated input tokens, our estimate of it)

    def window(self) -> int:
        """The window the turn's input is fitted to: ``min(configured, stated or learned)``."""
        if self.limit_tokens is None:
            return self.window_tokens
        return min(self.window_tokens, self.limit_tokens)

    def provider_tokens(self, estimate: int) -> int:
        """``estimate`` in the provider's tokens: scaled by stated input ÷ our estimate of it when
        this turn's error stated one, else as it is (the estimator counts on the safe side)."""
        if self._scale is None:
            return estimate
        stated, estimated = self._scale
        return -(-estimate * stated // estimated)

    def output_budget(self, messages: Sequence[Message]) -> int | None:
        """The ``max_tokens`` of a request of ``messages``, or None for the provider's own.

        None unless a window is known (stated or learned) and the configured output budget does
        not fit beside the request's input: then what the window leaves after the input and
        :func:`margin_tokens`, at least :func:`output_floor`.
        """
        limit, budget = self.limit_tokens, self.output_tokens
        if limit is None or budget is None:
            return None
        room = limit - self.provider_tokens(self.estimate(messages)) - margin_tokens(limit)
        if room >= budget:
            return None
        return max(output_floor(limit), room)

    def after_overflow(self, error: ContextOverflowError, refused: Sequence[Message]) -> OverflowRetry:
        """How to send ``refused`` once more (the module's rules); learns the stated window.

        Pure arithmetic on ``error``'s sizes and the refused request's estimate; the caller
        decides whether a retry is allowed and fits the input to ``window``.
        """
        estimate = max(1, self.estimate(refused))
        sent = self.output_budget(refused) or self.output_tokens
        limit, prompt = error.limit_tokens, error.prompt_tokens
        output = error.output_tokens or sent
        if self.output_tokens is None and error.output_tokens is not None:
            self.output_tokens = error.output_tokens  # the server's default budget, now known
        if prompt is not None:
            self._scale = (prompt, estimate)
        if limit is None:
            return OverflowRetry(window=max(1, int(estimate * FALLBACK_SHARE)))
        self.limit_tokens = limit
        self.limits.learn(self.preset, limit)
        margin = margin_tokens(limit)
        if prompt is not None and output is not None:
            room = limit - prompt - margin
            if output_floor(limit) <= room < output:
                return OverflowRetry(window=None, max_tokens=room, limit_tokens=limit)
        reserve = 0 if output is None else min(output, limit // 4)
        allowed = max(1, limit - reserve - margin)
        window = allowed if prompt is None else allowed * estimate // max(1, prompt)
        if window >= estimate:  # the stated sizes do not say how much to cut
            window = int(estimate * FALLBACK_SHARE)
        return OverflowRetry(window=max(1, window), limit_tokens=limit)


def refit_request(
    fitter: RequestFitter, error: ContextOverflowError, conversation: list[Message], sent: list[Message]
) -> tuple[list[Message], int | None] | None:
    """``(request, window)`` to send once more after a later request of a turn was refused, or None.

    The same request when a smaller ``max_tokens`` is the fix (``window`` None: the fitter's
    output budget now gives it), else the turn's messages fitted to the window sized from the
    refused request and the stated limit — only when that makes the request smaller (None: nothing
    more to cut, the same request would be refused again).
    """
    retry = fitter.after_overflow(error, sent)
    if retry.window is None:
        log.warning("context overflow of a later request; retrying once with max_tokens %s", retry.max_tokens)
        return sent, None
    fitted = fitter.fit(list(conversation), window=retry.window)
    if same_request(fitted, sent):
        return None
    log.warning(
        "context overflow of a later request; retrying once fitted to a window of %d (stated %s)",
        retry.window,
        retry.limit_tokens,
    )
    return fitted, retry.window


def same_request(one: Sequence[Message], other: Sequence[Message]) -> bool:
    """Whether two requests hold the very same message objects (a fit that cut nothing)."""
    return len(one) == len(other) and all(a is b for a, b in zip(one, other, strict=True))
