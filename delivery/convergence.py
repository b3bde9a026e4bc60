"""Which turns one connection must still see end, and when to look them up (PROTOCOL §1).

The channel layer may drop any message (``group_send`` over capacity, expiry; DESIGN §2), so a
connection can miss a turn's terminal snapshot or its ``turn_committed`` while the turn itself
was committed. A :class:`ConvergenceLedger` per connection remembers the turns it has reason to
expect an end of — a running snapshot passed, ``ready.running`` listed it, or the connection
acknowledged its message — and which of the two end frames went out. A turn that is quiet for
``quiet_seconds`` becomes *due*: its owner (``conversations.chat.reconcile``) reads its state from the
database and sends what is missing; a turn still running is looked at again later, with the
quiet period doubled each time (up to ``max_quiet_seconds``) so a long tool call costs a few reads.

It also answers "was this already sent here?" for both end frames, so that a late copy from the
layer, or a turn's plain fallback after its final went out, is dropped: each connection gets each
end frame once.

Pure module: no Django, Channels or httpx imports; not thread-safe (one consumer, one loop).
Times are monotonic seconds passed in by the caller.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["ConvergenceLedger", "Due"]


@dataclass(slots=True)
class _Expected:
    inbox_id: str | None
    turn_id: str | None
    quiet_until: float
    quiet: float
    terminal_sent: bool = False
    committed_sent: bool = False


@dataclass(frozen=True, slots=True)
class Due:
    """Keys to look up now: inbox ids (turn not seen yet) and turn ids."""

    inbox_ids: tuple[str, ...]
    turn_ids: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.inbox_ids or self.turn_ids)


class ConvergenceLedger:
    """The turns one connection expects to see end.

    Args:
        quiet_seconds: Silence after which an expected turn is looked up.
        max_quiet_seconds: The longest silence between two lookups of a turn that still runs.
        max_expected: Turns tracked at most; past it the oldest is dropped.
        remember_sent: Ended turns whose sent end frames are remembered (late copies dropped).
    """

    def __init__(
        self,
        quiet_seconds: float = 5.0,
        *,
        max_quiet_seconds: float = 40.0,
        max_expected: int = 256,
        remember_sent: int = 256,
    ) -> None:
        self.quiet_seconds = quiet_seconds
        self.max_quiet_seconds = max_quiet_seconds
        self._max_expected = max_expected
        self._remember_sent = remember_sent
        self._by_turn: dict[str, _Expected] = {}
        self._by_inbox: dict[str, _Expected] = {}
        self._order: OrderedDict[int, _Expected] = OrderedDict()  # id(entry) → entry, oldest first
        self._terminal_sent: OrderedDict[str, None] = OrderedDict()
        self._committed_sent: OrderedDict[str, None] = OrderedDict()

    def __bool__(self) -> bool:
        return bool(self._order)

    def __len__(self) -> int:
        return len(self._order)

    # --- what passed through the connection ---------------------------------------------------
    def expect_message(self, inbox_id: str, now: float) -> bool:
        """This connection acknowledged a user message: expect its turn to end.

        Returns True when the ledger gained an entry (its lookup loop may need a nudge).
        """
        if inbox_id in self._by_inbox:
            return False
        self._add(_Expected(inbox_id, None, now + self.quiet_seconds, self.quiet_seconds))
        return True

    def saw_running(self, turn_id: str, now: float, inbox_id: str | None = None) -> bool:
        """A running snapshot of ``turn_id`` arrived (or ``ready.running`` listed it).

        ``inbox_id``: the turn's user message, when the snapshot names it: the ack's entry for
        that message becomes this turn's (no lookup needed to learn it). O(1): called for every
        running snapshot. Returns True when the ledger gained an entry.
        """
        entry = self._by_turn.get(turn_id)
        if entry is None and inbox_id is not None:
            acked = self._by_inbox.get(inbox_id)
            if acked is not None and acked.turn_id is None:
                entry = self._bind(acked, turn_id)
        if entry is not None:
            entry.quiet = self.quiet_seconds
            entry.quiet_until = now + self.quiet_seconds
            return False
        if turn_id in self._terminal_sent and turn_id in self._committed_sent:
            return False
        self._add(_Expected(None, turn_id, now + self.quiet_seconds, self.quiet_seconds))
        return True

    def terminal_sent(self, turn_id: str) -> bool:
        """Whether this connection already sent the turn's terminal snapshot."""
        return turn_id in self._terminal_sent

    def committed_sent(self, turn_id: str) -> bool:
        """Whether this connection already sent the turn's ``turn_committed``."""
        return turn_id in self._committed_sent

    def sent_terminal(self, turn_id: str) -> None:
        """The turn's terminal snapshot went out."""
        self._remember(self._terminal_sent, turn_id)
        entry = self._by_turn.get(turn_id)
        if entry is not None:
            entry.terminal_sent = True
            self._settle_if_done(entry)

    def sent_committed(self, turn_id: str, inbox_id: str | None) -> None:
        """The turn's ``turn_committed`` went out (``inbox_id``: its user row's id, when known)."""
        self._remember(self._committed_sent, turn_id)
        entry = self._by_turn.get(turn_id)
        by_inbox = self._by_inbox.get(inbox_id) if inbox_id else None
        if entry is None and by_inbox is not None:
            entry = self._bind(by_inbox, turn_id)
        elif entry is not None and by_inbox is not None and by_inbox is not entry:
            self._drop(by_inbox)  # the ack's entry and the snapshots' entry are one turn
            entry.inbox_id = inbox_id
            self._by_inbox[inbox_id] = entry  # type: ignore[index]
        if entry is None:
            return
        entry.committed_sent = True
        entry.terminal_sent = entry.terminal_sent or turn_id in self._terminal_sent
        self._settle_if_done(entry)

    # --- lookups ------------------------------------------------------------------------------
    def due(self, now: float) -> Due:
        """Expected turns quiet long enough to be looked up now."""
        inbox_ids, turn_ids = [], []
        for entry in self._order.values():
            if entry.quiet_until <= now:
                if entry.turn_id is not None:
                    turn_ids.append(entry.turn_id)
                elif entry.inbox_id is not None:
                    inbox_ids.append(entry.inbox_id)
        return Due(tuple(inbox_ids), tuple(turn_ids))

    def next_due_in(self, now: float) -> float | None:
        """Seconds until the next lookup is due (0 when one is due now), None when none is expected."""
        if not self._order:
            return None
        return max(0.0, min(entry.quiet_until for entry in self._order.values()) - now)

    def still_running(self, inbox_id: str, turn_id: str | None, now: float) -> None:
        """A lookup found the turn queued or running: look again after a longer silence."""
        # The ack's entry first: binding it to the turn merges the snapshots' entry into it, so
        # one push-back covers both (pushing only the other would leave the ack's entry due).
        entry = (self._by_inbox.get(inbox_id) if inbox_id else None) or (
            self._by_turn.get(turn_id) if turn_id else None
        )
        if entry is None:
            return
        if turn_id and entry.turn_id is None:
            entry = self._bind(entry, turn_id)
        entry.quiet = min(entry.quiet * 2, self.max_quiet_seconds)
        entry.quiet_until = now + entry.quiet

    def postpone(self, due: Due, now: float) -> None:
        """After a lookup of ``due``: any of its turns still due waits a quiet period again."""
        entries = [self._by_inbox.get(key) for key in due.inbox_ids] + [
            self._by_turn.get(key) for key in due.turn_ids
        ]
        for entry in entries:
            if entry is not None and entry.quiet_until <= now:
                entry.quiet_until = now + entry.quiet

    def forget(self, inbox_id: str | None = None, turn_id: str | None = None) -> None:
        """Stop expecting a turn (it ended and was reconciled, or it is unknown to storage)."""
        for entry in (self._by_turn.get(turn_id or ""), self._by_inbox.get(inbox_id or "")):
            if entry is not None:
                self._drop(entry)

    # --- internals ----------------------------------------------------------------------------
    def _add(self, entry: _Expected) -> _Expected:
        while len(self._order) >= self._max_expected:
            self._drop(next(iter(self._order.values())))
        self._order[id(entry)] = entry
        if entry.turn_id is not None:
            self._by_turn[entry.turn_id] = entry
        if entry.inbox_id is not None:
            self._by_inbox[entry.inbox_id] = entry
        return entry

    def _bind(self, entry: _Expected, turn_id: str) -> _Expected:
        """The ack's entry learned its turn id; a separate entry for that turn merges into it."""
        other = self._by_turn.get(turn_id)
        if other is not None and other is not entry:
            entry.terminal_sent = entry.terminal_sent or other.terminal_sent
            entry.committed_sent = entry.committed_sent or other.committed_sent
            self._drop(other)
        entry.turn_id = turn_id
        self._by_turn[turn_id] = entry
        return entry

    def _drop(self, entry: _Expected) -> None:
        self._order.pop(id(entry), None)
        if entry.turn_id is not None and self._by_turn.get(entry.turn_id) is entry:
            del self._by_turn[entry.turn_id]
        if entry.inbox_id is not None and self._by_inbox.get(entry.inbox_id) is entry:
            del self._by_inbox[entry.inbox_id]

    def _settle_if_done(self, entry: _Expected) -> None:
        if entry.terminal_sent and entry.committed_sent:
            self._drop(entry)

    def _remember(self, sent: OrderedDict[str, None], turn_id: str) -> None:
        sent[turn_id] = None
        sent.move_to_end(turn_id)
        while len(sent) > self._remember_sent:
            sent.popitem(last=False)
