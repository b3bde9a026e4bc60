"""Credit-based flow control for live snapshots on one WebSocket connection.

PROTOCOL.md "Flow control for live snapshots": Daphne has no backpressure, so per connection and
turn at most ``limit`` (4) running ``turn_updated`` frames may be unacknowledged by ``seen``. While
the window is full only the newest running snapshot is kept, and it goes out when credit returns.
Terminal snapshots always go out at once. No revision lower than (or equal to) one already sent
for a turn is ever sent again, so a client never sees a turn go backwards.

The window stores opaque payloads (the consumer passes the frame text) and never looks inside.
Memory per connection: the running turns it has seen, plus the ids and terminal revisions of the
last ``remember_finished`` finished turns (to drop late duplicates); ``forget()`` drops a turn.

Pure module: no Django, Channels or httpx imports; not thread-safe (one consumer, one loop).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Generic, TypeVar

__all__ = ["SnapshotCreditWindow"]

P = TypeVar("P")


class _TurnWindow(Generic[P]):
    __slots__ = ("unacked", "max_sent", "pending_revision", "pending")

    def __init__(self) -> None:
        self.unacked: deque[int] = deque()  # revisions sent and not yet seen, ascending
        self.max_sent = -1
        self.pending_revision = -1  # -1: nothing pending (revisions start at 0)
        self.pending: P | None = None


class SnapshotCreditWindow(Generic[P]):
    """Decides which ``turn_updated`` payloads a connection sends, and when.

    Args:
        limit: Unacknowledged running snapshots allowed per turn (PROTOCOL: 4).
        remember_finished: How many finished turns to remember, to drop late frames for them.
        max_turns: How many running turns to track; past it the oldest is forgotten (a turn whose
            terminal frame the layer dropped would otherwise stay forever).

    Raises:
        ValueError: ``limit`` < 1.
    """

    def __init__(self, limit: int = 4, *, remember_finished: int = 64, max_turns: int = 256) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self._remember_finished = remember_finished
        self._max_turns = max_turns
        self._turns: dict[str, _TurnWindow[P]] = {}
        self._finished: OrderedDict[str, int] = OrderedDict()  # turn id -> terminal revision
        self._peak_outstanding = 0

    def offer(self, turn_id: str, revision: int, terminal: bool, payload: P) -> list[P]:
        """A snapshot arrived from the layer.

        Args:
            turn_id: The turn it belongs to.
            revision: Its revision.
            terminal: Whether its status is terminal.
            payload: What to send (opaque).

        Returns:
            The payloads to send now, in order: ``[payload]``, or ``[]`` when it is stale (not
            newer than what was sent or is pending) or waits for credit as the pending one.
        """
        if turn_id in self._finished:
            return []
        window = self._turns.get(turn_id)
        if window is None:
            if len(self._turns) >= self._max_turns:
                del self._turns[next(iter(self._turns))]
            window = self._turns[turn_id] = _TurnWindow()
        if revision <= window.max_sent:
            return []
        if terminal:
            # The terminal snapshot supersedes whatever is pending; the turn is done here.
            del self._turns[turn_id]
            self._finished[turn_id] = revision
            while len(self._finished) > self._remember_finished:
                self._finished.popitem(last=False)
            return [payload]
        if revision <= window.pending_revision:
            return []
        if len(window.unacked) < self.limit:
            window.pending, window.pending_revision = None, -1
            window.unacked.append(revision)
            window.max_sent = revision
            self._note_outstanding(window)
            return [payload]
        window.pending, window.pending_revision = payload, revision
        self._note_outstanding(window)
        return []

    def seen(self, turn_id: str, revision: int) -> list[P]:
        """The client acknowledged ``turn_id`` up to ``revision`` (cumulative).

        Returns:
            ``[pending]`` when credit returned and a newer snapshot was waiting, else ``[]``
            (also for unknown or finished turns).
        """
        window = self._turns.get(turn_id)
        if window is None:
            return []
        unacked = window.unacked
        while unacked and unacked[0] <= revision:
            unacked.popleft()
        if window.pending_revision < 0 or len(unacked) >= self.limit:
            return []
        payload, window.pending = window.pending, None
        unacked.append(window.pending_revision)
        window.max_sent, window.pending_revision = window.pending_revision, -1
        return [payload]

    def forget(self, turn_id: str) -> None:
        """Drops all state for ``turn_id`` (e.g. the client switched away); unknown ids are fine."""
        self._turns.pop(turn_id, None)
        self._finished.pop(turn_id, None)

    def unacked(self, turn_id: str) -> int:
        """How many running snapshots of ``turn_id`` await ``seen`` (0 for unknown turns)."""
        window = self._turns.get(turn_id)
        return 0 if window is None else len(window.unacked)

    def has_pending(self, turn_id: str) -> bool:
        """Whether a running snapshot of ``turn_id`` waits for credit."""
        window = self._turns.get(turn_id)
        return window is not None and window.pending_revision >= 0

    def outstanding(self, turn_id: str) -> int:
        """Running snapshots of ``turn_id`` the server holds for this client: sent and not yet
        acknowledged (in the server's send buffers, as far as it knows) plus the pending one.

        At most ``limit + 1`` (PROTOCOL §1); 0 for unknown or finished turns.
        """
        window = self._turns.get(turn_id)
        return 0 if window is None else len(window.unacked) + (window.pending_revision >= 0)

    @property
    def peak_outstanding(self) -> int:
        """The highest :meth:`outstanding` any turn reached on this connection (read-only)."""
        return self._peak_outstanding

    def _note_outstanding(self, window: _TurnWindow[P]) -> None:
        count = len(window.unacked) + (window.pending_revision >= 0)
        if count > self._peak_outstanding:
            self._peak_outstanding = count
