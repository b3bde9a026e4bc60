"""Compacting a dialog now: the service behind ``/compact`` (seed 004 §7, seed 002 Task 6).

:func:`compact_dialog` reads the rows after the current summary, picks a boundary that keeps the
newest rows verbatim and never splits a tool call from its results, asks the model to fold the
older rows into the summary, and commits the new ``summary`` + ``summary_seq`` with one
conditional UPDATE. History rows are never deleted; the next turn's input is the system prompt,
the summary and the rows after ``summary_seq`` (``storage.start_next_turn`` +
``history.build_turn_input``).

It runs on the control path (a task of ``supervisor.control_supervisor()``), not in the dialog's
executor: a running turn goes on, and its rows land after the boundary. Two compactions of one
dialog race safely: the second commit sees a moved ``summary_seq`` and is discarded.

Automatic compaction (``auto_compaction``, seed 002 §6d) reuses :func:`summarise_rows` on the
rows the turn already holds; the builder (``turn_input``) stores its result with
:func:`commit_auto_summary` (conditional on the dialog's ``state_version``, seed 000 §7.1), and a
failure is counted with :func:`record_auto_compact_failure` (three in a row switch it off until a
manual ``/compact`` or a new dialog, DESIGN §6).

Errors: :class:`CompactionError` carries a user-facing ``message`` (with a log reference); raw
provider errors stay in the log. ``storage.NotFoundError`` passes through (unknown or deleted
dialog).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass

from django.conf import settings
from django.db.models import F

from conversations import storage
from conversations.agent.failures import provider_failure_text
from conversations.agent.log_safety import one_line
from conversations.context.compaction import (
    choose_boundary,
    clean_summary,
    fit_summary_request,
    rows_to_keep,
    summary_token_cap,
    summary_too_large,
)
from conversations.models import Dialog
from conversations.storage.runner import run_storage
from conversations.storage.shapes import scrub_text
from conversations.usage.scopes import dialog_scope
from providers.base import LLMProvider
from providers.errors import ProviderError
from providers.types import ProviderRequest

log = logging.getLogger(__name__)


class CompactionError(Exception):
    """A compaction failed and nothing was changed.

    Attributes:
        message: what to tell the user (no provider payload; ends with the log reference).
        ref: the reference of the log entry with the details.
    """

    def __init__(self, message: str, *, ref: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.ref = ref


@dataclass(frozen=True)
class CompactionOutcome:
    """What :func:`compact_dialog` did.

    Attributes:
        compacted: a new summary was committed.
        covered_seq: the summary now stands for the rows with ``seq <= covered_seq`` (None when
            nothing was compacted).
        summarised_rows: how many history rows were folded into the summary this time.
        kept_rows: how many rows after the boundary stay verbatim.
        summary_chars: the new summary's length in characters (0 when nothing was compacted).
        reason: the user's answer when nothing was done, a whole sentence (``""`` when
            ``compacted``).
    """

    compacted: bool
    covered_seq: int | None = None
    summarised_rows: int = 0
    kept_rows: int = 0
    summary_chars: int = 0
    reason: str = ""

    @property
    def notice(self) -> str:
        """A one-line answer for the user (the ``/compact`` notification)."""
        if not self.compacted:
            return self.reason
        kept = (
            "the newer message is sent as it is"
            if self.kept_rows == 1
            else f"the {self.kept_rows:,} newer messages are sent as they are"
        )
        return (
            f"Compacted {_count(self.summarised_rows, 'earlier message')} into a summary of "
            f"{self.summary_chars:,} characters that the model reads instead; {kept}. "
            "Your history is unchanged."
        )


def nothing_to_compact(rows: int, kept: int) -> str:
    """The ``/compact`` answer when nothing is older than the rows that are always kept.

    ``rows`` is the number of history rows since the last summary, ``kept`` how many of the
    newest of them stay verbatim (from the newest question of the user's on).
    """
    if rows == 0:
        return "Nothing to compact yet: there are no messages since the last summary."
    newest = (
        "the last message is always kept as it is"
        if kept == 1
        else (f"the last {kept:,} messages are always kept as they are")
    )
    return f"Nothing to compact yet: {newest}, and there is nothing older since the last summary."


def _count(n: int, noun: str) -> str:
    """``"1 message"``, ``"2 messages"``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


async def compact_dialog(
    dialog_id: str, provider: LLMProvider, *, keep: int | None = None, timeout: float | None = None
) -> CompactionOutcome:
    """Fold the dialog's older history into its summary now.

    Args:
        dialog_id: the unified dialog id (``storage`` checks it is live; ownership is the
            caller's check).
        provider: the model that writes the summary.
        keep: rows to keep verbatim at most (default ``PICOBOT.compact_keep_messages``); fewer
            when they do not fit the context window — the rule automatic compaction follows
            (``compaction.rows_to_keep``) — and the newest user row is always kept
            (``compaction.choose_boundary``).
        timeout: seconds the model may take (default ``PICOBOT.compact_timeout``).

    Returns:
        The outcome: ``compacted`` False with a ``reason`` when there was too little to compact
        or another compaction of the dialog committed first (nothing changed then).

    Raises:
        CompactionError: the offline replay provider, a provider failure, timeout or crash, an
            empty summary, or one too large to use (``reject_oversized``); nothing was changed.
        storage.NotFoundError: the dialog is unknown or deleted.
        django.db.DatabaseError: storage kept failing after ``run_storage``'s retries.
    """
    config = settings.PICOBOT
    keep = config.compact_keep_messages if keep is None else keep
    timeout = config.compact_timeout if timeout is None else timeout
    if provider.offline:
        raise CompactionError(
            "Compaction needs a configured model; the offline replay provider cannot summarise."
        )
    source = await run_storage(storage.compaction_source, dialog_id)
    rows = source["rows"]
    budget = summary_budget()
    # The newest rows that fit stay verbatim, at most ``keep`` (README: "at most"): a dialog whose
    # kept rows would not fit the window is compacted, like the automatic path does.
    kept = rows_to_keep(rows, keep, budget)
    boundary = choose_boundary(rows, kept)
    if boundary is None:
        return CompactionOutcome(
            compacted=False,
            reason=nothing_to_compact(len(rows), kept),
        )
    folded = [r for r in rows if r["seq"] <= boundary]
    request, _ = summary_request(provider, source["summary"], folded, budget)
    summary = await summarise(dialog_id, provider, request, timeout)
    reject_oversized(dialog_id, summary, budget)
    committed = await run_storage(storage.commit_summary, dialog_id, summary, boundary, source["summary_seq"])
    if not committed:
        log.info("compaction of %s discarded: another compaction came first", dialog_id)
        return CompactionOutcome(
            compacted=False,
            reason="Nothing was changed: another compaction of this dialog finished first.",
        )
    log.info("compacted %s up to seq %d (%d rows, %d chars)", dialog_id, boundary, len(folded), len(summary))
    return CompactionOutcome(
        compacted=True,
        covered_seq=boundary,
        summarised_rows=len(folded),
        kept_rows=len(rows) - len(folded),
        summary_chars=len(summary),
    )


def summary_budget(window: int | None = None) -> int:
    """Tokens a summary request may take: the compaction share of the model's context window.

    ``window`` defaults to ``PICOBOT.llm_context_window``; the rest of the window is left for
    the summary the model writes.
    """
    config = settings.PICOBOT
    window = config.llm_context_window if window is None else window
    return max(1, int(window * config.compact_threshold))


def summary_request(
    provider: LLMProvider, previous_summary: str, rows: list[dict], budget: int
) -> tuple[ProviderRequest, int]:
    """The summary request for ``rows`` within ``budget`` tokens, its answer capped.

    The material asks for at most ``compaction.summary_token_cap(budget)`` tokens; the request's
    ``max_tokens`` is twice that plus the provider's thinking budget (a reasoning model spends
    output tokens before it writes), so a runaway answer stops early without starving a short one.

    Returns:
        ``(request, omitted_rows)`` (``compaction.fit_summary_request``).
    """
    cap = summary_token_cap(budget)
    request, omitted = fit_summary_request(previous_summary, rows, budget, max_tokens=cap)
    request.max_tokens = 2 * cap + int(getattr(provider, "thinking_budget", 0) or 0)
    return request, omitted


def reject_oversized(dialog_id: str, summary: str, budget: int) -> None:
    """Raise :class:`CompactionError` when ``summary`` is too large to use within ``budget``
    tokens (``compaction.summary_too_large``): it would crowd out the conversation it replaces."""
    if summary_too_large(summary, budget):
        ref = secrets.token_hex(4)
        log.warning(
            "compaction of %s: the summary of %d chars is too large for a %d-token request (ref %s)",
            dialog_id,
            len(summary),
            budget,
            ref,
        )
        raise CompactionError(
            f"The model's summary was too long to use ({len(summary):,} characters); nothing was changed "
            f"(ref {ref}).",
            ref=ref,
        )


@dataclass(frozen=True)
class RowsSummary:
    """A summary that :func:`summarise_rows` wrote (not committed yet).

    Attributes:
        summary: the new summary text (it replaces the previous one, which it merges).
        covers_seq: it stands for the rows with ``seq <= covers_seq``.
        kept_rows: the rows after ``covers_seq`` (history form, oldest first): what stays verbatim.
        summarised_rows: how many rows were folded in.
        omitted_rows: how many of those were too many for one summary request and were only
            mentioned (``compaction.fit_summary_request``).
    """

    summary: str
    covers_seq: int
    kept_rows: list[dict]
    summarised_rows: int
    omitted_rows: int = 0


async def summarise_rows(
    dialog_id: str,
    provider: LLMProvider,
    previous_summary: str,
    rows: list[dict],
    *,
    keep: int,
    budget: int,
    timeout: float,
) -> RowsSummary | None:
    """Fold all but the newest ``keep`` rows into a new summary through the model (one call).

    Args:
        dialog_id: for the log only.
        provider: the model that writes the summary (never the offline replay provider).
        previous_summary: the dialog's current summary (merged into the new one).
        rows: the history rows after the current summary, oldest first (history form).
        keep: rows to keep verbatim at least (``compaction.choose_boundary``: the cut is before
            a user row, so a tool call never loses its results).
        budget: tokens the summary request may take (``summary_budget``).
        timeout: seconds the model may take.

    Returns:
        The summary, or None when nothing can be folded (no safe cut). No DB access.

    Raises:
        CompactionError: provider failure, timeout, crash or an unusable answer — also one too
            large to use within ``budget`` (``reject_oversized``).
    """
    boundary = choose_boundary(rows, keep)
    if boundary is None:
        return None
    folded = [r for r in rows if r["seq"] <= boundary]
    request, omitted = summary_request(provider, previous_summary, folded, budget)
    summary = await summarise(dialog_id, provider, request, timeout)
    reject_oversized(dialog_id, summary, budget)
    return RowsSummary(
        summary=summary,
        covers_seq=boundary,
        kept_rows=[r for r in rows if r["seq"] > boundary],
        summarised_rows=len(folded),
        omitted_rows=omitted,
    )


def commit_auto_summary(
    dialog_id: str, summary: str, covers_seq: int, expected_summary_seq: int, expected_state_version: int
) -> int | None:
    """Store an automatic compaction's summary if the dialog did not change meanwhile.

    One conditional UPDATE (seed 000 §7.1 "compression update committed only if the state
    version still matches"): the dialog is live, its ``state_version`` is still
    ``expected_state_version`` and its ``summary_seq`` still ``expected_summary_seq``, and
    ``covers_seq`` is committed history. Resets ``auto_compact_failures`` and bumps
    ``state_version``. Touches the DB (call through ``run_storage``).

    Returns:
        The dialog's new ``state_version``, or None when the update lost (nothing changed).
    """
    if covers_seq <= expected_summary_seq:
        return None
    updated = Dialog.objects.filter(
        pk=dialog_id,
        deleted_at__isnull=True,
        state_version=expected_state_version,
        summary_seq=expected_summary_seq,
        history_revision__gte=covers_seq,
    ).update(
        summary=scrub_text(summary),
        summary_seq=covers_seq,
        auto_compact_failures=0,
        state_version=F("state_version") + 1,
    )
    return expected_state_version + 1 if updated else None


def record_auto_compact_failure(dialog_id: str) -> int:
    """Count one more consecutive automatic compaction failure; returns the new count.

    Not a state change of the dialog (``state_version`` stays: a running turn is not stale
    because its compaction failed). Returns 0 for an unknown or deleted dialog. Touches the DB.
    """
    Dialog.objects.filter(pk=dialog_id, deleted_at__isnull=True).update(
        auto_compact_failures=F("auto_compact_failures") + 1
    )
    row = (
        Dialog.objects.filter(pk=dialog_id, deleted_at__isnull=True)
        .values_list("auto_compact_failures")
        .first()
    )
    return int(row[0]) if row else 0


async def summarise(dialog_id: str, provider: LLMProvider, request: ProviderRequest, timeout: float) -> str:
    """The model's cleaned summary, within ``timeout`` seconds.

    Raises:
        CompactionError: timeout, provider failure, crash or no usable summary — none, or one
            the model did not end itself (``AssistantResponse.finished_normally``: cut off at
            the output token cap, filtered, refused, paused) — (the details
            only in the log, under the error's ``ref``).
    """
    ref = secrets.token_hex(4)
    try:
        # Recorded as a compaction (issue 17); inside a turn under the turn's ids.
        with dialog_scope("compaction", dialog_id, keep_turn=True):
            async with asyncio.timeout(timeout):
                response = await provider.collect(request)
    except TimeoutError:
        log.warning("compaction of %s timed out after %g s (ref %s)", dialog_id, timeout, ref)
        raise CompactionError(
            f"The model did not finish the summary within {timeout:g} s; nothing was changed (ref {ref}).",
            ref=ref,
        ) from None
    except ProviderError as exc:
        log.warning(
            "compaction of %s: provider error %s (HTTP %s) (ref %s)",
            dialog_id,
            exc.kind,
            exc.http_status,
            ref,
        )
        raise CompactionError(
            f"{provider_failure_text(exc)}; nothing was changed (ref {ref}).", ref=ref
        ) from exc
    except Exception as exc:
        log.exception("compaction of %s: the summary request crashed (ref %s)", dialog_id, ref)
        raise CompactionError(
            f"Internal error while summarising; nothing was changed (ref {ref}).", ref=ref
        ) from exc
    if not response.finished_normally:
        # Like clean_summary's unclosed think span: a summary that stops mid-sentence (or was
        # filtered, refused, paused) must not replace the history it stands for.
        log.warning(
            "compaction of %s: the summary did not finish normally (finish_reason %s) (ref %s)",
            dialog_id,
            one_line(str(response.finish_reason))[:80],
            ref,
        )
        if (response.finish_reason or "").lower() in ("length", "max_tokens"):
            reason = "was cut off at its output limit"
        else:
            reason = "did not finish normally"
        raise CompactionError(f"The model's summary {reason}; nothing was changed (ref {ref}).", ref=ref)
    summary = clean_summary(response.text)
    if summary is None:
        log.warning("compaction of %s: the model's answer held no summary (ref %s)", dialog_id, ref)
        raise CompactionError(
            f"The model returned no usable summary; nothing was changed (ref {ref}).", ref=ref
        )
    return summary
