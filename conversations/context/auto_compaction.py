"""Automatic compaction inside a turn: one summary through the model, a failure counted and told
(seed 002 §6d, seed 000 §7.1; DESIGN §6).

The builder (``turn_input``) calls :func:`summarise_for_turn` when a request passes the
compaction share of the window: older rows are folded into the summary through the provider
(``compaction_service.summarise_rows``), under the turn's ``compacting`` phase. The result is a
:class:`CompressionUpdate`, stored later only while the dialog's ``state_version`` still matches.
A failure is counted on the dialog (:func:`count_failure`; three in a row switch automatic
compaction off) and told in a notice (:func:`failure_notice`); the turn goes on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from django.db import DatabaseError

from conversations.context.compaction import MAX_CONSECUTIVE_FAILURES, choose_boundary, rows_to_keep
from conversations.context.compaction_service import (
    CompactionError,
    record_auto_compact_failure,
    summarise_rows,
)
from conversations.storage import TurnStart
from conversations.storage.runner import run_storage
from providers.base import LLMProvider

log = logging.getLogger(__name__)


class CompactingPhase(Protocol):
    """Where the builder shows that it compacts (``delivery.turn.TurnController``)."""

    def begin_compacting(self) -> bool: ...

    def end_compacting(self) -> bool: ...


@dataclass(frozen=True)
class CompressionUpdate:
    """A summary an automatic compaction wrote, to be committed conditionally (seed 000 §7.1).

    Attributes:
        summary: the new summary (it replaces and merges the previous one).
        covers_seq: it stands for the history rows with ``seq <= covers_seq``.
        expected_summary_seq: the dialog's ``summary_seq`` it was built on.
        kept_rows: the rows after ``covers_seq`` (history form), as the input used them.
        summarised_rows: how many rows it folded in.
    """

    summary: str
    covers_seq: int
    expected_summary_seq: int
    kept_rows: list[dict] = field(repr=False)
    summarised_rows: int = 0


async def summarise_for_turn(
    start: TurnStart,
    provider: LLMProvider,
    summary: str,
    rows: list[dict],
    *,
    target: int,
    keep_messages: int,
    fixed: int,
    timeout: float,
    phase: CompactingPhase | None = None,
) -> CompressionUpdate | None:
    """One automatic summary, under the ``compacting`` phase; None when nothing can fold.

    Args:
        summary, rows: the dialog's summary and the history rows after it (history form).
        target: estimated tokens the request may take; ``fixed``: its fixed parts (overhead,
            tool definitions). ``keep_messages``: rows kept verbatim at most
            (``compaction.rows_to_keep``). ``timeout``: seconds the summary call may take.

    Raises:
        CompactionError: the summary call failed, timed out or gave nothing usable.
    """
    keep = rows_to_keep(rows, keep_messages, target, fixed=fixed)
    if choose_boundary(rows, keep) is None:
        return None  # nothing can be folded without splitting the current turn
    if phase is not None:
        phase.begin_compacting()
    try:
        result = await summarise_rows(
            start.dialog_id,
            provider,
            summary,
            rows,
            keep=keep,
            budget=target,
            timeout=timeout,
        )
    finally:
        if phase is not None:
            phase.end_compacting()
    if result is None:
        return None
    return CompressionUpdate(
        summary=result.summary,
        covers_seq=result.covers_seq,
        expected_summary_seq=start.summary_seq,
        kept_rows=result.kept_rows,
        summarised_rows=result.summarised_rows,
    )


async def count_failure(start: TurnStart, failures: int) -> int:
    """Count a failed automatic compaction on the dialog; returns the dialog's consecutive failures.
    Storage trouble only goes to the log (``failures + 1`` is returned then)."""
    try:
        return await run_storage(record_auto_compact_failure, start.dialog_id)
    except DatabaseError:
        log.exception("dialog %s: could not count a failed automatic compaction", start.dialog_id)
        return failures + 1


def failure_notice(exc: CompactionError, failures: int) -> str:
    """What the user is told of a failed automatic compaction (and that it is off, at
    :data:`~conversations.context.compaction.MAX_CONSECUTIVE_FAILURES` in a row)."""
    text = (
        f"Automatic compaction failed: {exc.message} This turn goes on with older tool results shortened "
        "and, if needed, the oldest messages left out."
    )
    if failures >= MAX_CONSECUTIVE_FAILURES:
        text += (
            f" After {failures} failures in a row automatic compaction is off for this dialog; /compact "
            "(or a new dialog) turns it back on."
        )
    return text
