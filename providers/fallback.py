"""The fallback chain of a model preset: :class:`FallbackProvider` (issue 17 "Fallback chain").

A preset may name fallbacks (``[models.NAME].fallbacks``); a turn's requests then go through a
``FallbackProvider`` over the chain (``PresetCatalog.chain``), each step the (metered) provider of
one preset, so every attempt is recorded under its own preset. The rules (README "Fallback"):

* Only before any visible chunk (text, reasoning, a tool call; usage and replay state are not
  visible): once the user saw output, a failure ends the turn as it would without a chain.
* Only on errors whose *type* means "try elsewhere" (:func:`falls_back`): rate-limited,
  overloaded, server error, a connect or first-byte timeout, no connection. Never on an auth
  error, a context overflow, a bad or blocked request, an in-band error, a response past the
  output cap or a truncation. Never decided by message text.
* A preset before a fallback does not retry those errors itself: its provider is built with
  ``retry_elsewhere = falls_back`` (the runtime does it), so a 429 moves on at once; the last
  preset keeps the bounded retry honouring ``Retry-After``.
* The chain is sticky for the provider's life (one turn): after a switch, later requests of the
  turn start at the preset that answered. ``on_switch`` is awaited before each switch (the turn
  shows a notice); :attr:`FallbackProvider.answering` names the current preset.
* An exhausted chain raises the last error, typed, its ``provider_message`` led by the presets
  tried (what the failure presenter shows).

Replay state needs nothing here: each step's provider keeps only the state it produced
(``providers.replay_identity``), so a fallback never receives the first preset's signatures.
Pure: no Django, no I/O of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from providers.base import LLMProvider
from providers.chunks import ProviderChunk, ProviderStateChunk, UsageChunk
from providers.errors import (
    OverloadedError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitedError,
    ServerError,
)
from providers.types import ProviderRequest

FALLBACK_TIMEOUT_PHASES = frozenset({"connect", "first_byte"})
"""Timeout phases that fall back: the server never started answering."""

_REASONS = {
    RateLimitedError: "is rate-limited",
    OverloadedError: "is overloaded",
    ServerError: "failed with a server error",
    ProviderTimeoutError: "did not answer in time",
    ProviderConnectionError: "cannot be reached",
}


def falls_back(error: ProviderError) -> bool:
    """Whether ``error`` (raised before any visible chunk) means "try the next preset".

    Decided by the error's type (and a timeout's ``phase``), never its message.
    """
    if isinstance(error, ProviderTimeoutError):
        return error.phase in FALLBACK_TIMEOUT_PHASES
    return isinstance(error, RateLimitedError | ServerError | ProviderConnectionError)


@dataclass(frozen=True, slots=True)
class FallbackSwitch:
    """One move along the chain: preset ``failed`` raised ``error``; ``next`` answers instead."""

    failed: str
    next: str
    error: ProviderError

    @property
    def reason(self) -> str:
        """``"is rate-limited"``, ``"is overloaded"``, … (by the error's type)."""
        for kind, reason in _REASONS.items():
            if isinstance(self.error, kind):
                return reason
        return "failed"

    @property
    def notice(self) -> str:
        """What the chat is told: ``"A is rate-limited; answering with B."``"""
        return f"Model {self.failed} {self.reason}; answering with {self.next}."


OnSwitch = Callable[[FallbackSwitch], Awaitable[object]]


class FallbackProvider(LLMProvider):
    """Streams from the first preset of ``steps`` that can answer (module docstring).

    Args:
        steps: ``(preset name, provider)`` in the order they are tried; at least one.
        on_switch: awaited before moving on to the next preset (a notice to the chat); an
            exception it raises ends the stream.

    Attributes:
        answering: the preset whose provider the next request goes to first (after a stream:
            the one that answered, or the last one tried).
        name, model, endpoint, offline: those of :attr:`answering`'s provider.

    Raises (from :meth:`stream`): ``ValueError`` for an empty chain (at construction); the
    :class:`ProviderError` that ended the chain (module docstring).
    """

    def __init__(self, steps: Sequence[tuple[str, LLMProvider]], on_switch: OnSwitch | None = None) -> None:
        if not steps:
            raise ValueError("a fallback chain needs at least one preset")
        self.steps = list(steps)
        self.on_switch = on_switch
        self._at = 0
        self._identify()

    @property
    def answering(self) -> str:
        return self.steps[self._at][0]

    def _identify(self) -> None:
        provider = self.steps[self._at][1]
        self.name, self.model = provider.name, provider.model
        self.endpoint, self.offline = provider.endpoint, provider.offline

    async def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        tried: list[str] = []
        while True:
            preset, provider = self.steps[self._at]
            visible = False
            try:
                async with contextlib.aclosing(provider.stream(request)) as chunks:
                    async for chunk in chunks:
                        visible = visible or not isinstance(chunk, UsageChunk | ProviderStateChunk)
                        yield chunk
                return
            except ProviderError as exc:
                tried.append(f"{preset} ({exc.kind})")
                last = self._at == len(self.steps) - 1
                if visible or not falls_back(exc):
                    raise
                if last:
                    if len(tried) > 1:
                        _name_tried(exc, tried)
                    raise
                switch = FallbackSwitch(preset, self.steps[self._at + 1][0], exc)
            self._at += 1
            self._identify()
            if self.on_switch is not None:
                await self.on_switch(switch)

    async def aclose(self) -> None:
        """Nothing: the steps' providers belong to the runtime, which closes them."""


def _name_tried(error: ProviderError, tried: list[str]) -> None:
    """Lead ``error``'s shown provider message with the presets tried (the failure text)."""
    lead = f"no model preset could answer (tried {', '.join(tried)})"
    error.provider_message = f"{lead}: {error.provider_message}" if error.provider_message else lead
