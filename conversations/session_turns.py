"""The runtime session glue of a dialog executor: turn starts and commits (seed 004 §5).

A turn start reads only the rows the worker's runtime ``Session`` lacks, or the whole history
when there is none or it does not fit; a commit appends its rows without a DB read. Both keep the
``SessionManager`` truthful: a session that cannot be trusted is evicted, never used.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from conversations import storage
from conversations.sessions import Session, SessionManager
from conversations.storage_runner import run_storage

log = logging.getLogger(__name__)


async def start_turn(sessions: SessionManager, dialog_id: str, worker_id: str, epoch: int) -> storage.TurnStart | None:
    """Start the next queued turn; its ``history`` is the dialog's full history after the summary.

    With a valid runtime session only the rows it lacks are read (``known_revision``) and
    applied to it (seed 004 §5); without one, or when the delta does not fit (a compaction
    elsewhere changed ``summary_seq``, a seq hole), the full history is loaded and becomes the
    session. A session that cannot be trusted is evicted, never used. Returns None when
    nothing is queued. Raises what ``storage.start_next_turn`` raises (the session is evicted).
    """
    session = sessions.get(dialog_id)
    known = {}
    if session is not None and session.valid:
        known = {"known_revision": session.history_revision, "known_summary_seq": session.summary_seq}
    try:
        start = await run_storage(
            storage.start_next_turn, dialog_id, worker_id, epoch, **known
        )
    except BaseException:
        sessions.evict(dialog_id)
        raise
    if start is None:
        return None
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
