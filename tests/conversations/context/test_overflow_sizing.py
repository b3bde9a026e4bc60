"""The retry after an overflow is sized from what was refused (``agent/overflow_sizing.py``, issue 17).

Pure: a request's estimate is given by the test (``estimate``), the provider's error by its
stated sizes. Input + output over the window with room for the input → the same input with a
smaller ``max_tokens``; otherwise the input is refitted to the stated window (scaled by our
estimate ÷ the stated input) or, with no window stated, to half the refused estimate. A stated
window is learned for the preset.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conversations.agent.learned_limits import LearnedLimits
from conversations.agent.overflow_sizing import (
    FALLBACK_SHARE,
    OverflowRetry,
    RequestSizing,
    margin_tokens,
    output_floor,
)
from providers.errors import ContextOverflowError
from providers.messages import Message

REFUSED = [Message.system("sys"), Message.user("q" * 100)]


def sizing(
    estimate: int = 6000, *, window: int = 128_000, output: int | None = 4096, **options
) -> RequestSizing:
    options.setdefault("limits", LearnedLimits())
    return RequestSizing(lambda messages: estimate, window_tokens=window, output_tokens=output, **options)


def overflow(**sizes: int) -> ContextOverflowError:
    return ContextOverflowError("too long", http_status=400, **sizes)


def test_input_plus_output_over_the_window_lowers_max_tokens_and_keeps_the_input():
    sized = sizing(6000)
    retry = sized.after_overflow(overflow(limit_tokens=8192, prompt_tokens=5000, output_tokens=4096), REFUSED)
    room = 8192 - 5000 - margin_tokens(8192)
    assert retry == OverflowRetry(window=None, max_tokens=room, limit_tokens=8192)
    assert sized.output_budget(REFUSED) == room, "the retried request asks for exactly that budget"


def test_with_too_little_room_for_an_answer_the_input_is_shrunk_instead():
    sized = sizing(9000)
    retry = sized.after_overflow(overflow(limit_tokens=8192, prompt_tokens=7600, output_tokens=4096), REFUSED)
    assert retry.window is not None and retry.max_tokens is None
    reserve = 8192 // 4
    assert retry.window == (8192 - reserve - margin_tokens(8192)) * 9000 // 7600
    assert retry.window < 9000


def test_a_prompt_over_the_window_is_refitted_to_the_window_in_estimate_units():
    # Our estimate (250,000) over-counts the provider's 210,000: the window is scaled up by that ratio.
    sized = sizing(250_000, window=1_000_000, output=None)
    retry = sized.after_overflow(overflow(limit_tokens=200_000, prompt_tokens=210_000), REFUSED)
    assert retry == OverflowRetry(window=(200_000 - 4000) * 250_000 // 210_000, limit_tokens=200_000)
    assert sized.window() == 200_000


def test_without_a_stated_window_half_the_refused_estimate_is_the_window():
    sized = sizing(6000)
    assert sized.after_overflow(overflow(), REFUSED) == OverflowRetry(window=int(6000 * FALLBACK_SHARE))
    assert sized.output_budget(REFUSED) is None and sized.window() == 128_000


def test_stated_sizes_that_would_cut_nothing_fall_back_to_half():
    # Our estimate is under the stated window: the numbers do not say how much to cut.
    sized = sizing(3000)
    retry = sized.after_overflow(overflow(limit_tokens=8192), REFUSED)
    assert retry == OverflowRetry(window=1500, limit_tokens=8192)


def test_the_stated_window_is_learned_for_the_preset_and_used_by_its_next_turns():
    limits = LearnedLimits()
    first = sizing(20_000, preset="small", limits=limits)
    first.after_overflow(overflow(limit_tokens=8192, prompt_tokens=18_000), REFUSED)
    assert limits.window("small") == 8192

    later = sizing(5000, preset="small", limits=limits)
    assert later.window() == 8192, "min(configured, learned) from the start"
    assert later.output_budget(REFUSED) == 8192 - 5000 - margin_tokens(8192), "4096 would not fit beside 5000"
    assert sizing(100, preset="small", limits=limits).output_budget(REFUSED) is None, (
        "4096 fits: as configured"
    )
    assert sizing(5000, preset="other", limits=limits).window() == 128_000


def test_an_unnamed_preset_learns_nothing():
    limits = LearnedLimits()
    sizing(20_000, limits=limits).after_overflow(overflow(limit_tokens=8192), REFUSED)
    assert limits.window("") is None


def test_a_budget_the_server_stated_but_we_never_sent_is_what_gets_lowered():
    sized = sizing(3000, output=None)  # no max_tokens configured: the server's default was refused
    retry = sized.after_overflow(
        overflow(limit_tokens=4096, prompt_tokens=2778, output_tokens=8000, requested_tokens=10778), REFUSED
    )
    assert retry.max_tokens == 4096 - 2778 - margin_tokens(4096)
    assert sized.output_budget(REFUSED) == retry.max_tokens


@given(
    limit=st.integers(256, 2_000_000),
    prompt=st.integers(1, 2_000_000),
    output=st.integers(1, 200_000),
    estimate=st.integers(1, 4_000_000),
)
def test_a_retry_is_always_smaller_than_what_was_refused(limit, prompt, output, estimate):
    sized = sizing(estimate, output=output)
    retry = sized.after_overflow(
        overflow(limit_tokens=limit, prompt_tokens=prompt, output_tokens=output), REFUSED
    )
    if retry.window is None:
        assert output_floor(limit) <= retry.max_tokens < output
        assert prompt + retry.max_tokens < limit
    else:
        assert 1 <= retry.window < max(2, estimate)


@pytest.mark.parametrize("limit", [0, -5])
def test_a_non_positive_window_is_not_learned(limit):
    limits = LearnedLimits()
    limits.learn("p", limit)
    assert limits.window("p") is None
