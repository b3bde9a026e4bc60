"""Runtime sessions: the in-memory projection of live dialogs, evicted after a TTL (seed 004 §5, §6).

A ``Session`` is what the seeds call the runtime instance of a ``Dialog`` (DESIGN §3): the dialog's
title, compaction summary and the history rows after the summary, as the agent worker holds them
between turns. With it, a turn start reads only the rows the worker does not hold yet
(``storage.start_next_turn(known_revision=…)``) instead of the whole history, and a commit appends
its own rows without reading them back. The database keeps everything: an evicted session is
reloaded from it by the next turn or by ``/switch`` back (seed 004 §6.4 "内存 session 超时 → 仅释放
内存，Storage 记录保留"). While a dialog is live, its session can also answer a history page when a
storage read fails (seed 004 §8 "若 session 在内存中，继续使用内存数据").

Pure: no Django here except the settings read of ``session_manager()``. Times are seconds of the
manager's clock (``time.monotonic`` by default; tests inject a fake one). Not thread-safe: use a
manager from one event loop (the agent worker's).

History rows are the dicts of ``storage.message_to_history_row`` (server form: they hold
``provider_state``, ``media_refs`` and tool calls' ``raw_arguments``); ``history_row_to_protocol``
is the one projection to the client form (PROTOCOL §1 "History message") and is what
``storage.message_to_protocol`` uses too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from conversations.storage.shapes import history_row_to_protocol

log = logging.getLogger(__name__)

Clock = Callable[[], float]


# PROTOCOL §1 "History message": the fields a client may see, in this order.
@dataclass
class Session:
    """The runtime projection of one live dialog (seed 004 §5; DESIGN §3 "the runtime object").

    Attributes:
        dialog_id: The unified id ``"{channel}:{chat_id}:{dialog_id}"`` (the ``Dialog`` pk).
        title: The dialog's title as of the last turn start.
        summary: The compaction summary that replaces rows with ``seq <= summary_seq``.
        summary_seq: The highest seq the summary covers (0 = no summary).
        history: History-form rows with ``seq > summary_seq``, in seq order, gap-free. Treat as
            read-only: the rows are shared with turn inputs.
        history_revision: (property) The highest seq held (``summary_seq`` when ``history`` is
            empty); derived from ``history``, so it can never disagree with it.
        loaded_at: Clock seconds of the full load this session came from.
        last_used: Clock seconds of the last use (what the TTL counts from).
        valid: False once a contiguity check failed: the session must be reloaded from the DB,
            never used or extended again.
    """

    dialog_id: str
    title: str = ""
    summary: str = ""
    summary_seq: int = 0
    history: list[dict] = field(default_factory=list, repr=False)  # never dump rows into logs
    loaded_at: float = 0.0
    last_used: float = 0.0
    valid: bool = True

    @classmethod
    def loaded(
        cls,
        dialog_id: str,
        *,
        title: str,
        summary: str,
        summary_seq: int,
        rows: Iterable[dict],
        history_revision: int,
        now: float,
    ) -> Session:
        """A session from a full load (``rows`` = every row with ``seq > summary_seq``).

        The result is ``valid`` only when the rows are exactly ``summary_seq + 1 …
        history_revision`` in order; otherwise it is returned invalid (the caller uses the rows
        it read for this turn but must not keep the session).
        """
        session = cls(
            dialog_id,
            title=title,
            summary=summary,
            summary_seq=summary_seq,
            loaded_at=now,
            last_used=now,
        )
        rows = list(rows)
        if not session.append(rows) or session.history_revision != history_revision:
            session.valid = False
            session.history = rows  # what the DB said, for this turn only
        return session

    @property
    def history_revision(self) -> int:
        """The highest seq held: the last row's, or ``summary_seq`` without rows."""
        return self.history[-1]["seq"] if self.history else self.summary_seq

    def append(self, rows: Iterable[dict]) -> bool:
        """Append rows that must continue the history: seqs ``history_revision + 1, + 2, …``.

        All or nothing: on the first row whose seq is not the next one the session becomes
        invalid (it must be reloaded; a hole is never kept) and nothing is appended. Returns
        whether the rows were appended. An invalid session refuses everything.
        """
        rows = list(rows)
        if not self.valid:
            return False
        expected = self.history_revision
        for row in rows:
            expected += 1
            if row.get("seq") != expected:
                log.warning(
                    "session %s: row seq %r does not follow revision %d; reload needed",
                    self.dialog_id,
                    row.get("seq"),
                    expected - 1,
                )
                self.valid = False
                return False
        self.history.extend(rows)
        return True

    def apply_turn_start(
        self,
        rows: Iterable[dict],
        *,
        title: str,
        summary: str,
        summary_seq: int,
        history_revision: int,
        now: float,
    ) -> bool:
        """Apply a turn start's delta (``TurnStart.history`` with ``history_is_delta``).

        ``rows`` are the rows with seq above this session's revision (at least the turn's user
        row); ``history_revision`` is the dialog's revision after them. Title and summary text
        are taken as given (they may change without a new row). Returns False, leaving the
        session invalid, when the delta does not fit: another ``summary_seq`` (a compaction
        happened elsewhere), a seq hole, or rows that do not reach ``history_revision``.
        """
        if not self.valid:
            return False
        if summary_seq != self.summary_seq:
            self.valid = False
            return False
        if not self.append(rows) or self.history_revision != history_revision:
            self.valid = False
            return False
        self.title = title
        self.summary = summary
        self.last_used = now
        return True

    def apply_commit(self, rows: Iterable[dict], *, now: float) -> bool:
        """Append a commit's new rows (``CommitResult.history_rows``); see ``append``.

        A commit that reports a higher revision than the rows it returned leaves the session
        behind but consistent: the next turn start's delta brings the missing rows.
        """
        ok = self.append(rows)
        if ok:
            self.last_used = now
        return ok


class SessionManager:
    """The process's runtime sessions by dialog id, with TTL eviction (seed 004 §6.1, §6.4).

    Args:
        ttl_seconds: A session unused for longer than this leaves memory on the next
            ``evict_idle``; 0 (or less) = never evict.
        clock: Seconds, monotonic (``time.monotonic``); tests pass a fake.

    Memory only: eviction never touches the database, so an evicted dialog is reloaded intact
    by its next turn (or ``/switch`` back).
    """

    def __init__(self, ttl_seconds: float, clock: Clock = time.monotonic) -> None:
        self.ttl_seconds = float(ttl_seconds)
        self.clock = clock
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, dialog_id: object) -> bool:
        return dialog_id in self._sessions

    def get(self, dialog_id: str) -> Session | None:
        """The held session of ``dialog_id`` (valid or not), or None. Does not touch it."""
        return self._sessions.get(dialog_id)

    def put(self, session: Session) -> None:
        """Hold ``session`` (replacing any other of its dialog) and mark it used now.

        Raises:
            ValueError: ``session`` is invalid (an invalid session must be reloaded, not kept).
        """
        if not session.valid:
            raise ValueError(f"refusing to hold the invalid session of {session.dialog_id}")
        session.last_used = self.clock()
        self._sessions[session.dialog_id] = session

    def touch(self, dialog_id: str) -> bool:
        """Mark the dialog's session used now; False when none is held."""
        session = self._sessions.get(dialog_id)
        if session is None:
            return False
        session.last_used = self.clock()
        return True

    def evict(self, dialog_id: str) -> bool:
        """Drop the dialog's session from memory (the DB keeps everything); False when none."""
        return self._sessions.pop(dialog_id, None) is not None

    def evict_idle(self) -> list[str]:
        """Drop every session unused for longer than the TTL; return their dialog ids.

        With a TTL of 0 nothing is ever evicted (seed 004 §9, DESIGN §6 "0 = never").
        """
        if self.ttl_seconds <= 0:
            return []
        now = self.clock()
        idle = [d for d, s in self._sessions.items() if now - s.last_used > self.ttl_seconds]
        for dialog_id in idle:
            del self._sessions[dialog_id]
        return idle

    def cleanup_once(self) -> list[str]:
        """One cleanup pass: ``evict_idle`` plus an INFO log line when something left memory."""
        evicted = self.evict_idle()
        if evicted:
            log.info(
                "evicted %d idle runtime session(s) (ttl %.0f s; %d left): %s",
                len(evicted),
                self.ttl_seconds,
                len(self._sessions),
                ", ".join(evicted),
            )
        return evicted

    async def run_cleanup(self, interval_seconds: float) -> None:
        """Run ``cleanup_once`` every ``interval_seconds`` s until cancelled (seed 004 §6.4).

        A failing pass is logged and the loop goes on; only cancellation ends it.

        Raises:
            ValueError: ``interval_seconds`` is not positive.
        """
        if interval_seconds <= 0:
            raise ValueError("the session cleanup interval must be positive")
        while True:
            await asyncio.sleep(interval_seconds)
            try:
                self.cleanup_once()
            except Exception:
                log.exception("runtime session cleanup failed; trying again in %.0f s", interval_seconds)

    def history_page_from_memory(
        self, session_id: str, before_seq: int | None = None, limit: int = 50
    ) -> dict | None:
        """A ``session_history`` payload served from memory, or None (seed 004 §8, DESIGN §6).

        For when the storage read of ``storage.history_page`` fails while the dialog is live:
        same shape (``{session_id, history_revision, messages, has_more}``, the newest ``limit``
        rows with ``seq < before_seq``, oldest first, protocol form via
        ``history_row_to_protocol``), but only when that page lies fully within the rows held in
        memory; None when no valid session is held, ``limit < 1``, or the page reaches rows
        below the memory (rows covered by the summary, or older than the session). Seqs are
        gap-free from 1 (DESIGN §3), so ``has_more`` is "the page starts above seq 1".

        Ownership is not checked here: the caller must have authorised ``session_id``.
        """
        session = self._sessions.get(session_id)
        if session is None or not session.valid or limit < 1:
            return None
        first = session.summary_seq + 1  # the lowest seq memory may hold
        upper = (
            session.history_revision if before_seq is None else min(before_seq - 1, session.history_revision)
        )
        if upper < 1:
            page: list[dict] = []
            has_more = False
        else:
            lower = max(upper - limit + 1, 1)
            if lower < first:
                return None
            page = session.history[lower - first : upper - first + 1]
            has_more = lower > 1
        return {
            "session_id": session.dialog_id,
            "history_revision": session.history_revision,
            "messages": [history_row_to_protocol(r, session_id=session.dialog_id) for r in page],
            "has_more": has_more,
        }


_manager: SessionManager | None = None


def session_manager() -> SessionManager:
    """The process-wide manager, built on first use from ``settings.PICOBOT.session_ttl_hours``
    (hours → seconds; 0 = never evict)."""
    global _manager
    if _manager is None:
        from django.conf import settings

        _manager = SessionManager(settings.PICOBOT.session_ttl_hours * 3600.0)
    return _manager


def reset_session_manager() -> None:
    """Forget the process-wide manager (tests; the next ``session_manager()`` builds a new one)."""
    global _manager
    _manager = None
