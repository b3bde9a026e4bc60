"""Per-user daily budgets (issue 17): ``PICOBOT_USER_DAILY_TOKENS`` and ``PICOBOT_USER_DAILY_COST``.

A user whose usage rows of the current UTC day reach either budget (input + output tokens; cost
in the presets' currency; 0 = no budget) gets no new turn until UTC midnight:
``storage.accept_message`` refuses the message before it is stored (``BudgetExceededError``: the
WebSocket's ``error`` frame ``budget_exceeded``, REST 429), and a turn queued before the budget
ran out fails at its start without calling the model (:func:`run_within_budget`), its message kept
in the history. The day's totals are one indexed query on ``(user, day)``; calls still waiting in
the usage writer's queue (at most its ``delay``) are not counted yet. Users of external platforms
without an account (Feishu) have no budget.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from django.conf import settings
from django.db.models import Sum

from conversations.agent.failures import TurnFailedError, TurnFailure, TurnFailureKind
from conversations.models import UsageRecord

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BudgetRefusal:
    """Why a user gets no new turn today.

    Attributes:
        limit: ``"tokens"`` or ``"cost"``: the budget that is used up.
        used, budget: the day's usage and the budget, in that limit's unit.
        resets_at: the next UTC midnight.
        message: what the user reads (names the budget and when it resets).
    """

    limit: str
    used: Decimal
    budget: Decimal
    resets_at: datetime
    message: str


def refusal(
    tokens: int, cost: Decimal, *, max_tokens: int, max_cost: Decimal, now: datetime
) -> BudgetRefusal | None:
    """The refusal for a day's ``tokens`` and ``cost`` under the budgets (0 = none), or None.

    A budget is used up once the day's usage reaches it (pure).
    """
    resets_at = datetime.combine(now.astimezone(UTC).date() + timedelta(days=1), time(0), UTC)
    if max_tokens > 0 and tokens >= max_tokens:
        limit, used, budget = "tokens", Decimal(tokens), Decimal(max_tokens)
        what = f"daily token budget ({max_tokens:,} token{'' if max_tokens == 1 else 's'}; {tokens:,} used today)"
    elif max_cost > 0 and cost >= max_cost:
        limit, used, budget = "cost", cost, max_cost
        what = f"daily cost budget ({_money(max_cost)}; {_money(cost)} used today)"
    else:
        return None
    left = resets_at - now
    hours, minutes = divmod(max(0, int(left.total_seconds())) // 60, 60)
    message = f"Your {what} is used up; it resets at 00:00 UTC (in {hours} h {minutes:02d} min)."
    return BudgetRefusal(limit, used, budget, resets_at, message)


def _money(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.0001')).normalize():f}"


def day_usage(user_id: int, day: date) -> tuple[int, Decimal]:
    """``(input + output tokens, cost)`` of the user's usage rows of ``day`` (one query)."""
    sums = UsageRecord.objects.filter(user_id=user_id, day=day).aggregate(
        i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cost")
    )
    return (sums["i"] or 0) + (sums["o"] or 0), sums["c"] or Decimal(0)


def check_budget(user_id: int | None, now: datetime | None = None) -> BudgetRefusal | None:
    """The user's refusal for today under the settings, or None (no query when no budget is set
    or there is no user). Touches the DB."""
    config = settings.PICOBOT
    max_tokens, max_cost = config.user_daily_tokens, Decimal(str(config.user_daily_cost))
    if user_id is None or (max_tokens <= 0 and max_cost <= 0):
        return None
    now = now or datetime.now(UTC)
    tokens, cost = day_usage(user_id, now.astimezone(UTC).date())
    return refusal(tokens, cost, max_tokens=max_tokens, max_cost=max_cost, now=now)


async def run_within_budget(
    user_id: int | None, run: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any
) -> T:
    """``await run(*args, **kwargs)`` unless the user's budget is used up (a message queued
    before it ran out): then the turn fails at once, before any provider call.

    Raises:
        TurnFailedError: the budget is used up (the failure carries the refusal's message).
    """
    from conversations.storage.runner import run_storage

    config = settings.PICOBOT
    budgeted = user_id is not None and (config.user_daily_tokens > 0 or config.user_daily_cost > 0)
    refused = await run_storage(check_budget, user_id) if budgeted else None  # no trip without one
    if refused is not None:
        raise TurnFailedError(
            TurnFailure.of(
                TurnFailureKind.AGENT_CREATION,
                user_message=f"{refused.message} This message was not answered; it stays in the history.",
                detail=f"daily {refused.limit} budget used up ({refused.used} of {refused.budget})",
            )
        )
    return await run(*args, **kwargs)
