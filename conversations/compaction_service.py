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

from conversations import storage
from conversations.compaction import build_summary_request, choose_boundary, clean_summary
from conversations.storage_runner import run_storage
from providers.base import LLMProvider, ProviderRequest
from providers.errors import ProviderError

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
        reason: why nothing was done (``""`` when ``compacted``).
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
            return f"Nothing was compacted: {self.reason}"
        return (
            f"Compacted {self.summarised_rows} earlier message(s) into a summary of {self.summary_chars} "
            f"characters; the newest {self.kept_rows} stay as they are. The history itself is unchanged."
        )


async def compact_dialog(
    dialog_id: str, provider: LLMProvider, *, keep: int | None = None, timeout: float | None = None
) -> CompactionOutcome:
    """Fold the dialog's older history into its summary now.

    Args:
        dialog_id: the unified dialog id (``storage`` checks it is live; ownership is the
            caller's check).
        provider: the model that writes the summary.
        keep: rows to keep verbatim (default ``PICOBOT["COMPACT_KEEP_MESSAGES"]``); the newest
            user row is always kept (``compaction.choose_boundary``).
        timeout: seconds the model may take (default ``PICOBOT["COMPACT_TIMEOUT"]``).

    Returns:
        The outcome: ``compacted`` False with a ``reason`` when there was too little to compact
        or another compaction of the dialog committed first (nothing changed then).

    Raises:
        CompactionError: the offline replay provider, a provider failure, timeout or crash, or an
            empty summary; nothing was changed.
        storage.NotFoundError: the dialog is unknown or deleted.
        django.db.DatabaseError: storage kept failing after ``run_storage``'s retries.
    """
    config = settings.PICOBOT
    keep = int(config["COMPACT_KEEP_MESSAGES"]) if keep is None else keep
    timeout = float(config["COMPACT_TIMEOUT"]) if timeout is None else timeout
    if provider.offline:
        raise CompactionError("Compaction needs a configured model; the offline replay provider cannot summarise.")
    source = await run_storage(storage.compaction_source, dialog_id)
    rows = source["rows"]
    boundary = choose_boundary(rows, keep)
    if boundary is None:
        return CompactionOutcome(
            compacted=False,
            reason=f"only {len(rows)} message(s) since the last summary, and the newest {keep} "
            "(always from a question of yours on) stay as they are.",
        )
    folded = [r for r in rows if r["seq"] <= boundary]
    request = build_summary_request(source["summary"], folded)
    summary = await _summarise(dialog_id, provider, request, timeout)
    committed = await run_storage(storage.commit_summary, dialog_id, summary, boundary, source["summary_seq"])
    if not committed:
        log.info("compaction of %s discarded: another compaction came first", dialog_id)
        return CompactionOutcome(compacted=False, reason="another compaction of this dialog finished first.")
    log.info("compacted %s up to seq %d (%d rows, %d chars)", dialog_id, boundary, len(folded), len(summary))
    return CompactionOutcome(
        compacted=True,
        covered_seq=boundary,
        summarised_rows=len(folded),
        kept_rows=len(rows) - len(folded),
        summary_chars=len(summary),
    )


async def _summarise(dialog_id: str, provider: LLMProvider, request: ProviderRequest, timeout: float) -> str:
    """The model's cleaned summary; raises CompactionError (details only in the log)."""
    ref = secrets.token_hex(4)
    try:
        async with asyncio.timeout(timeout):
            response = await provider.collect(request)
    except TimeoutError:
        log.warning("compaction of %s timed out after %g s (ref %s)", dialog_id, timeout, ref)
        raise CompactionError(
            f"The model did not finish the summary within {timeout:g} s; nothing was changed (ref {ref}).", ref=ref
        ) from None
    except ProviderError as exc:
        log.warning("compaction of %s: provider error %s (HTTP %s) (ref %s)", dialog_id, exc.kind, exc.http_status, ref)
        raise CompactionError(
            f"The model provider failed ({exc.kind}); nothing was changed (ref {ref}).", ref=ref
        ) from exc
    except Exception as exc:
        log.exception("compaction of %s: the summary request crashed (ref %s)", dialog_id, ref)
        raise CompactionError(f"Internal error while summarising; nothing was changed (ref {ref}).", ref=ref) from exc
    summary = clean_summary(response.text)
    if summary is None:
        log.warning("compaction of %s: the model's answer held no summary (ref %s)", dialog_id, ref)
        raise CompactionError(f"The model returned no usable summary; nothing was changed (ref {ref}).", ref=ref)
    return summary
