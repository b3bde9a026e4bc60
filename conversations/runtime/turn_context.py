"""What a dialog executor gets from the worker that owns it: ``TurnContext``.

The worker builds one context and hands it to every ``DialogExecutor`` it starts; the executor
reaches the rest of the process only through it, never through the worker itself. Everything in
it is shared by all the worker's executors and lives as long as the worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conversations.agent.tool_registry import ToolRegistry
    from conversations.runtime.lease_keeper import LeaseKeeper
    from conversations.runtime.provider import ProviderFor
    from conversations.runtime.sessions import SessionManager
    from conversations.storage.shapes import TurnStart
    from delivery.outbound import OutboundDispatcher
    from delivery.sinks import TurnSink
    from providers.base import LLMProvider

SinkFactory = Callable[["TurnStart"], Awaitable["TurnSink"]]
"""Opens a turn's sink (seed 003 §10.1 ``open_turn``); it may raise: the turn is then delivered
final-only (seed 000 §5.1)."""


@dataclass(frozen=True)
class TurnContext:
    """The worker's parts a dialog executor uses.

    Attributes:
        worker_id: The lease owner id every storage trip of a turn names.
        provider: The default model preset's provider (titles, compaction by command).
        provider_for: A model preset's name ("" = the default) → its provider (``runtime.provider``;
            ``before_fallback=True``: the instance for a place before a fallback).
        tools: The tool registry (bound per turn to its dialog and chat).
        sessions: The runtime sessions of the live dialogs (seed 004 §6).
        lease_keeper: Renews the worker's leases; its ``confirmed_until`` (monotonic seconds) and
            ``next_round()`` tell whether a dialog is still the worker's (seed 003 §8.3).
        open_sink: Opens a turn's sink (:data:`SinkFactory`).
        outbound: Where a failed delivery's one plain fallback goes.
        pace: The snapshot interval (seconds) to use now for a base interval (``delivery.load``).
        schedule_title: Starts a background title attempt for a dialog (never awaited by a turn).
        stopped: Set when the worker's ``stop()`` begins: no new turns, shorter waits.
        storage_alerts: Dialog id → monotonic time of its last "storage is failing" notice.
        reported_turns: Turn ids whose failure the chat was already told (a commit storage
            refused): not announced again as a restart's victims.
    """

    worker_id: str
    provider: LLMProvider
    provider_for: ProviderFor
    tools: ToolRegistry
    sessions: SessionManager
    lease_keeper: LeaseKeeper
    open_sink: SinkFactory
    outbound: OutboundDispatcher
    pace: Callable[[float], float]
    schedule_title: Callable[[str], None]
    stopped: asyncio.Event
    storage_alerts: dict[str, float] = field(default_factory=dict)
    reported_turns: set[str] = field(default_factory=set)

    @property
    def stopping(self) -> bool:
        """True once the worker's ``stop()`` began."""
        return self.stopped.is_set()
