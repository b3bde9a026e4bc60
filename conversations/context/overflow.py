"""Recovery from a context overflow the provider reported, and the words a turn fails with then (seed 000 §7.2).

:func:`run_with_overflow_recovery` prepares the turn's input (``turn_input.TurnInputBuilder``),
runs the turn, and when the provider refuses the input as too long before anything was shown,
runs it once more sized from what was refused (``agent/overflow_sizing.py``, issue 17): the same
input with a smaller ``max_tokens`` when the error says input + output budget overflowed and the
input alone fits, else the input rebuilt from the compacted state to a window derived from the
stated limit (or half the refused estimate); a second overflow fails the turn clearly
(:class:`ContextPreparationError`). A
storage error while building the input fails the turn typed ``context_preparation``. Notices of
the builder (a failed compaction, left-out messages) go to the chat through ``publish``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import cast

from django.db import DatabaseError

from conversations.agent.failures import TurnFailedError, TurnFailure, TurnFailureKind
from conversations.agent.loop import AgentResult
from conversations.context.turn_input import (
    START_OVER,
    TOO_LONG,
    ContextPreparationError,
    PreparedInput,
    TurnInputBuilder,
)
from conversations.storage import TurnStart
from providers.errors import ContextOverflowError
from providers.messages import Message

log = logging.getLogger(__name__)

Publish = Callable[[str], Awaitable[object]]
"""Tells the chat a notice (a warning ``notification``)."""


def overflow_mid_turn_message(*, shortened: bool) -> str:
    """What a turn fails with when the provider reported a context overflow that could not be
    recovered: a later request (after tool calls) that overflowed also after it was fitted harder
    (``AgentLoop``; seed 000 §7.2: a second overflow fails clearly), one that could not be cut at
    all, or one after output was shown.

    Args:
        shortened: the refused request had been shortened to fit (``AgentResult.refused_shortened``);
            only then does the message say so — a request sent as it was claims no compaction.
    """
    reason = "the model refused this turn's input as over its context window"
    if shortened:
        reason += ", even after it was shortened to fit"
    return f"{TOO_LONG}: {reason}. {START_OVER}"


def overflow_again_message(prepared: PreparedInput, *, cut: bool = True) -> str:
    """What a turn whose recovered input overflowed again fails with (seed 000 §7.2).

    Args:
        prepared: the input of the refused retry.
        cut: the retry's input had been rebuilt smaller; False when only its output budget was
            lowered (the message then claims no cutting).
    """
    if not cut:
        return (
            f"{TOO_LONG}: the model refused its input again, also with a smaller output budget. {START_OVER}"
        )
    return (
        f"{TOO_LONG}: the model refused its input again after it was cut down to about "
        f"{prepared.estimate:,} tokens. {START_OVER}"
    )


def overflowed_before_output(result: AgentResult) -> bool:
    """Whether the provider reported a context overflow before the turn showed anything.

    Nothing shown means no complete message (no answer, no tool call) and no partial text or
    reasoning (seed 000 §7.2: only then can the turn start over unnoticed). Shown reasoning counts
    although it is no ``partial`` (it is not kept): the user saw it, and a retry would show a
    second attempt's reasoning after it.
    """
    return (
        isinstance(result.error, ContextOverflowError)
        and not result.messages
        and result.partial is None
        and not result.shown_before_error
    )


async def run_with_overflow_recovery(
    builder: TurnInputBuilder,
    start: TurnStart,
    run: Callable[[list[Message]], Awaitable[AgentResult]],
    *,
    publish: Publish | None = None,
) -> AgentResult:
    """Prepare the turn's input, run the turn, and recover from one context overflow (seed 000 §7.2).

    The input is built (and compacted, the compaction committed) by ``builder``; ``run`` is the
    agent loop (``AgentLoop.run``, whose requests take their ``max_tokens`` from ``builder``).
    When the provider reports a context overflow before anything was shown, the retry is sized
    by :meth:`TurnInputBuilder.after_overflow`: the same input with a smaller output budget, or
    the input rebuilt once through the same builder to a smaller window
    (:meth:`TurnInputBuilder.recover_after_overflow`); the turn runs once more. Notices (a
    failed compaction, left-out messages) go to ``publish``. The last prepared input is
    ``builder.prepared`` (its ``base_state_version`` for stale-state checks).

    Returns:
        The agent result (with ``error`` set for other provider failures, as ``run`` returns it).

    Raises:
        ContextPreparationError: the input cannot be made to fit, or the rebuilt one overflowed
            too; nothing of the turn was shown.
        TurnFailedError: storage failed while the input was built (kind ``context_preparation``).
    """
    prepared = await _preparing(start, builder.prepare(start), builder)
    await _tell(publish, prepared)
    result = await run(prepared.messages)
    if not overflowed_before_output(result):
        return result
    retry = builder.after_overflow(cast(ContextOverflowError, result.error), prepared.messages)
    if retry.window is None:
        log.warning(
            "dialog %s: context overflow of input + output budget (window %s tokens); sending the "
            "same input once more with max_tokens %s",
            start.dialog_id,
            retry.limit_tokens,
            retry.max_tokens,
        )
    else:
        log.warning(
            "dialog %s: context overflow at about %d estimated tokens (stated window %s); rebuilding "
            "the input once to a window of %d",
            start.dialog_id,
            prepared.estimate,
            retry.limit_tokens,
            retry.window,
        )
        prepared = await _preparing(
            start, builder.recover_after_overflow(start, prepared, window=retry.window), builder
        )
        await _tell(publish, prepared)
    result = await run(prepared.messages)
    if overflowed_before_output(result):
        log.warning(
            "dialog %s: context overflow again at about %d tokens", start.dialog_id, prepared.estimate
        )
        raise ContextPreparationError(overflow_again_message(prepared, cut=retry.window is not None))
    return result


async def _preparing(
    start: TurnStart, building: Awaitable[PreparedInput], builder: TurnInputBuilder
) -> PreparedInput:
    """Await a build of the input and commit its compression; a storage error (after
    ``run_storage``'s retries) becomes a typed ``context_preparation`` failure."""
    try:
        return await builder.commit_compression(start, await building)
    except DatabaseError as exc:
        raise TurnFailedError(
            TurnFailure.from_exception(TurnFailureKind.CONTEXT_PREPARATION, exc, traceback=False)
        ) from exc


async def _tell(publish: Publish | None, prepared: PreparedInput) -> None:
    if publish is None:
        return
    for notice in prepared.notices:
        try:
            await publish(notice)
        except Exception:
            log.exception("could not publish a context notice")
