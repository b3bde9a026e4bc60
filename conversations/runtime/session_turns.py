"""The runtime session glue of a dialog executor: turn starts and commits (seed 004 §5).

A turn start reads only the rows the worker's runtime ``Session`` lacks, or the whole history
when there is none or it does not fit; a commit appends its rows without a DB read. Both keep the
``SessionManager`` truthful: a session that cannot be trusted is evicted, never used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from conversations import storage
from conversations.runtime.sessions import Session, SessionManager
from conversations.storage.runner import close_if_broken, run_storage

log = logging.getLogger(__name__)


Prefetch = Callable[[storage.TurnStart], dict]
"""Reads what the turn's input needs, on the storage thread (``context.runtime_context.prefetch_turn_input``)."""


def known_state(sessions: SessionManager, dialog_id: str) -> dict:
    """``start_next_turn``'s ``known_revision``/``known_summary_seq`` from a valid runtime
    session, or ``{}`` (a full history read)."""
    session = sessions.get(dialog_id)
    if session is None or not session.valid:
        return {}
    return {"known_revision": session.history_revision, "known_summary_seq": session.summary_seq}


def begin_turn(
    dialog_id: str, worker_id: str, epoch: int, known: dict, prefetch: Prefetch | None
) -> storage.TurnStart | None:
    """``start_next_turn``, then ``prefetch`` of the started turn: one storage trip instead of
    three, each of which waits for a busy event loop to resume it. Runs on a storage
    thread. A prefetch that fails leaves ``prefetched`` None (the input builder reads it itself and
    reports what fails); the start is committed either way."""
    start = storage.start_next_turn(dialog_id, worker_id, epoch, **known)
    if start is None or prefetch is None:
        return start
    try:
        return replace(start, prefetched=prefetch(start))
    except Exception:  # noqa: BLE001 - read again (and reported) by the builder
        close_if_broken()
        log.debug("dialog %s: the turn input prefetch failed; the builder reads it", dialog_id, exc_info=True)
        return start


def claim_and_begin(
    dialog_id: str,
    worker_id: str,
    lease_ms: int,
    takeover: storage.Takeover | None,
    known: dict,
    prefetch: Prefetch | None,
    may_begin: Callable[[], bool] = lambda: True,
) -> tuple[storage.DialogClaim | None, storage.TurnStart | None]:
    """``storage.claim_dialog``, then the first turn's :func:`begin_turn` under the new epoch:
    what a worker does when a dialog wakes, in one storage trip. The turn is begun only when
    the claim found no interrupted turns (their notices go out first) and ``may_begin()`` still
    says so (a worker that began shutting down leaves the message queued for the next one); it
    is None when it was not: then the executor starts it itself (and reports a failure the claim
    swallowed here). Runs on a storage thread."""
    claim = storage.claim_dialog(dialog_id, worker_id, lease_ms, takeover=takeover)
    if claim is None or claim.interrupted != [] or not may_begin():
        return claim, None
    try:
        return claim, begin_turn(dialog_id, worker_id, claim.epoch, known, prefetch)
    except Exception:  # noqa: BLE001 - the executor's own start meets (and reports) it again
        close_if_broken()
        log.debug(
            "dialog %s: the first turn start after the claim failed; retried by the executor",
            dialog_id,
            exc_info=True,
        )
        return claim, None


async def start_turn(
    sessions: SessionManager, dialog_id: str, worker_id: str, epoch: int, *, prefetch: Prefetch | None = None
) -> storage.TurnStart | None:
    """Start the next queued turn; its ``history`` is the dialog's full history after the summary.

    With a valid runtime session only the rows it lacks are read (``known_revision``) and
    applied to it (seed 004 §5); without one, or when the delta does not fit (a compaction
    elsewhere changed ``summary_seq``, a seq hole), the full history is loaded and becomes the
    session. A session that cannot be trusted is evicted, never used. Returns None when
    nothing is queued. Raises what ``storage.start_next_turn`` raises (the session is evicted).
    """
    try:
        start = await run_storage(
            begin_turn, dialog_id, worker_id, epoch, known_state(sessions, dialog_id), prefetch
        )
    except BaseException:
        sessions.evict(dialog_id)
        raise
    return await adopt_start(sessions, start, worker_id, epoch)


async def adopt_start(
    sessions: SessionManager, start: storage.TurnStart | None, worker_id: str, epoch: int
) -> storage.TurnStart | None:
    """Bring the runtime session up to ``start`` (from :func:`begin_turn`) and give the turn its
    full history: a delta is applied to the session, a full read becomes it; a delta that does
    not fit reloads the history (``storage.load_history``)."""
    if start is None:
        return None
    dialog_id = start.dialog_id
    session = sessions.get(dialog_id)
    now = sessions.clock()
    if start.history_is_delta:
        applied = session is not None and session.apply_turn_start(
            start.history,
            title=start.title,
            summary=start.summary,
            summary_seq=start.summary_seq,
            history_revision=start.history_revision,
            now=now,
        )
        if applied:
            sessions.put(session)  # held again even if evicted meanwhile: it is in use
            return replace(start, history=list(session.history), history_is_delta=False)
        log.warning("dialog %s: the history delta does not fit the runtime session; reloading", dialog_id)
        sessions.evict(dialog_id)
        snapshot = await run_storage(storage.load_history, dialog_id, worker_id, epoch)
        start = replace(
            start,
            title=snapshot.title,
            summary=snapshot.summary,
            summary_seq=snapshot.summary_seq,
            history_revision=snapshot.history_revision,
            history=snapshot.history,
            history_is_delta=False,
        )
    fresh = Session.loaded(
        dialog_id,
        title=start.title,
        summary=start.summary,
        summary_seq=start.summary_seq,
        rows=start.history,
        history_revision=start.history_revision,
        now=now,
    )
    if fresh.valid:
        sessions.put(fresh)
    else:  # the DB's rows are used for this turn; every later turn loads them again
        log.warning("dialog %s: history seqs are not contiguous; not kept in memory", dialog_id)
        sessions.evict(dialog_id)
    return start


def remember_commit(sessions: SessionManager, dialog_id: str, commit: storage.CommitResult) -> None:
    """Append a successful commit's rows to the runtime session (no DB read; seed 004 §5.2).

    Nothing to do when the session left memory meanwhile (the next turn reloads it); a commit
    that does not continue it evicts it.
    """
    session = sessions.get(dialog_id)
    if session is None:
        return
    if not session.apply_commit(commit.history_rows, now=sessions.clock()):
        sessions.evict(dialog_id)
