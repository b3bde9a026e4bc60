"""The sink contract: what a platform adapter implements for one turn (seed 003 §10.1).

A sink is created per turn and target, owned by a
:class:`~delivery.coordinator.DeliveryCoordinator` from ``start()`` on, and closed by it at the
end. It holds the target's private state (a remote message id, an edit budget); the coordinator
knows nothing about platforms.

Errors a sink raises::

    SinkError                 ``permanent=True`` stops the coordinator's terminal retries
    └── SinkNotModified       the target already shows this content: counts as delivered
    (anything else)           transient: running updates are dropped, ``finish`` is retried

Pure module: no Django, Channels or httpx imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    from delivery.presentation import PresentedSnapshot

__all__ = ["FinalOnly", "LivePolicy", "SinkError", "SinkNotModified", "Snapshot", "TurnSink"]


@dataclass(frozen=True, slots=True)
class FinalOnly:
    """The sink shows only the terminal state (platforms that cannot edit; seed 003 §10.4)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The sink shows running snapshots, at most one per ``min_interval`` seconds.

    Raises:
        ValueError: ``min_interval`` is negative.
    """

    min_interval: float

    def __post_init__(self) -> None:
        if self.min_interval < 0:
            raise ValueError("min_interval must be >= 0 seconds")


LivePolicy: TypeAlias = FinalOnly | Snapshot


class TurnSink(Protocol):
    """One target's view of one turn (seed 003 §10.1). Owns the target's private state.

    Every call gets the full filtered snapshot — a
    :class:`~delivery.presentation.PresentedSnapshot`: its ``blocks``, ``answer_text()`` and
    ``to_dict()`` hold only what the target's policy shows — and its serialised JSON (the same
    string for every watcher); a sink never concatenates tokens. ``update`` and ``finish`` raise on failure
    (any exception; :class:`SinkError` to say it is permanent or "not modified"). ``finish`` may be
    called again with the same snapshot after a failure or timeout; it must not report
    "target not found" or "not sent" as success (seed 000 §5.2).
    """

    live_policy: LivePolicy

    async def update(self, snapshot: PresentedSnapshot, payload_json: str) -> None: ...

    async def finish(self, snapshot: PresentedSnapshot, payload_json: str) -> None: ...

    async def close(self) -> None: ...


class SinkError(Exception):
    """A sink failure. Other exceptions from a sink count as transient.

    Args:
        message: What failed (no secrets: it ends up in ``DeliveryResult.error`` and the admin).
        permanent: True when retrying cannot help (e.g. the chat no longer exists).
    """

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class SinkNotModified(SinkError):
    """The target already shows exactly this content; the call counts as delivered."""
