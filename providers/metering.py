"""One record per provider call, for usage rows and metrics: :class:`MeteredProvider`.

``MeteredProvider`` wraps the provider of one model preset. Every ``stream()`` through it (one
provider call, its transport retries included) ends in one :class:`ProviderCall` handed to the
registered observers: the preset, timings, the provider's usage (None when it sent none), how it
ended, and the :class:`CallScope` the caller set (which turn, dialog, user, channel and kind of
work made the call). Observers must be cheap and must not raise (a raising one is logged and
skipped): they run in the stream's task, after its last chunk.

The scope travels in a ``ContextVar`` (:data:`CALL_SCOPE`, :func:`call_scope`), so the agent loop,
the title service and compaction need not pass it through the provider interface. Transport
retries inside a call are announced separately (:func:`add_retry_observer`). Pure: no Django.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace

from providers.base import LLMProvider
from providers.chunks import (
    Done,
    ProviderChunk,
    ProviderStateChunk,
    ReasoningDelta,
    TextDelta,
    ToolCallArgumentsDelta,
    UsageChunk,
)
from providers.errors import ProviderError
from providers.hooks import ProviderHooks
from providers.messages import Usage
from providers.types import ProviderRequest

log = logging.getLogger(__name__)

CALL_KINDS = ("turn", "title", "compaction", "probe", "task")
"""What a call was made for: a turn's model request, a title, a summary, doctor's probe, a
background task's sub-agent (issue 18)."""


@dataclass(frozen=True, slots=True)
class CallScope:
    """Who made a provider call (strings; "" when unknown). ``user_id`` is the owner's pk."""

    kind: str = "turn"
    dialog_id: str = ""
    turn_id: str = ""
    user_id: int | None = None
    channel: str = ""


CALL_SCOPE: ContextVar[CallScope | None] = ContextVar("picobot_call_scope", default=None)


@contextlib.contextmanager
def call_scope(scope: CallScope | None = None, **changes: object) -> Iterator[CallScope]:
    """Set the scope of the provider calls made inside the block (``changes`` amend the current
    one, e.g. ``call_scope(kind="compaction")`` inside a turn)."""
    base = scope if scope is not None else (CALL_SCOPE.get() or CallScope())
    current = replace(base, **changes) if changes else base
    token = CALL_SCOPE.set(current)
    try:
        yield current
    finally:
        CALL_SCOPE.reset(token)


@dataclass(frozen=True, slots=True)
class ProviderCall:
    """One provider call as it ended.

    Attributes:
        preset: the model preset's name; provider, model: its vendor kind and model id.
        scope: the caller's :class:`CallScope` (a default scope when none was set).
        started_at: wall-clock start, seconds since the epoch.
        latency_s: start to the stream's end (success, failure or close), seconds.
        ttft_s: start to the first chunk other than usage or state, or None when none came.
        usage: the provider's usage, or None when it reported none.
        outcome: ``"ok"`` (``Done`` arrived), ``"error"`` (a ``ProviderError``) or ``"closed"``
            (the caller stopped reading: a cancel, a cut-off).
        error: the failure for ``"error"``.
        request: the request (for estimating tokens when ``usage`` is None).
        output_text: the streamed text, reasoning and tool-call arguments, joined, when ``usage``
            is None (for estimating output tokens); "" when the provider reported usage.
    """

    preset: str
    provider: str
    model: str
    scope: CallScope
    started_at: float
    latency_s: float
    ttft_s: float | None
    usage: Usage | None
    outcome: str
    error: ProviderError | None
    request: ProviderRequest
    output_text: str = ""


Observer = Callable[[ProviderCall], object]
_observers: list[Observer] = []


def add_observer(observer: Observer) -> None:
    """Receive every metered call of this process (idempotent)."""
    if observer not in _observers:
        _observers.append(observer)


def remove_observer(observer: Observer) -> None:
    with contextlib.suppress(ValueError):
        _observers.remove(observer)


def notify(call: ProviderCall) -> None:
    """Hand ``call`` to every observer; one that raises is logged and skipped."""
    for observer in list(_observers):
        try:
            observer(call)
        except Exception:
            log.exception("provider call observer %r failed", observer)


@dataclass(frozen=True, slots=True)
class ProviderRetry:
    """A transport retry about to wait (``providers._http``): ``provider`` kind, the error's
    ``kind``, ``delay_s`` seconds of wait, retry ``attempt`` (1-based) of ``max_retries``, and
    the caller's scope (None outside any)."""

    provider: str
    kind: str
    delay_s: float = 0.0
    attempt: int = 1
    max_retries: int = 1
    scope: CallScope | None = None


RetryObserver = Callable[[ProviderRetry], object]
_retry_observers: list[RetryObserver] = []


def add_retry_observer(observer: RetryObserver) -> None:
    """Receive a :class:`ProviderRetry` for every transport retry of this process (metrics count
    them; a turn's chat is told of a long wait); idempotent."""
    if observer not in _retry_observers:
        _retry_observers.append(observer)


def remove_retry_observer(observer: RetryObserver) -> None:
    with contextlib.suppress(ValueError):
        _retry_observers.remove(observer)


def notify_retry(
    provider: str, kind: str, *, delay_s: float = 0.0, attempt: int = 1, max_retries: int = 1
) -> None:
    """Tell the retry observers that ``provider`` retries after an error of ``kind`` (in the
    caller's scope); one that raises is logged and skipped."""
    retry = ProviderRetry(provider, kind, delay_s, attempt, max_retries, CALL_SCOPE.get())
    for observer in list(_retry_observers):
        try:
            observer(retry)
        except Exception:
            log.exception("provider retry observer %r failed", observer)


class MeteredProvider(LLMProvider):
    """``inner`` (the provider of preset ``preset``) with every call recorded (module docstring).

    Its ``name``, ``model``, ``offline``, ``endpoint`` and hooks are the inner provider's, so
    replay state and hooks behave as without the wrapper.
    """

    def __init__(self, inner: LLMProvider, preset: str) -> None:
        self.inner = inner
        self.preset = preset
        self.name = inner.name
        self.model = inner.model
        self.offline = inner.offline
        self.endpoint = inner.endpoint

    @property
    def hooks(self) -> ProviderHooks:
        return self.inner.hooks

    def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        return self._metered(request)

    def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:  # pragma: no cover
        return self.inner.stream(request)

    async def _metered(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        scope = CALL_SCOPE.get() or CallScope()
        started_at = time.time()
        start = time.perf_counter()
        first: float | None = None
        usage: Usage | None = None
        outcome, error = "closed", None
        output: list[str] = []  # references only; joined when the provider reports no usage
        chunks = self.inner.stream(request)
        try:
            async for chunk in chunks:
                kind = type(chunk)  # one lookup a chunk: this runs for every token streamed
                if kind is TextDelta or kind is ReasoningDelta:
                    output.append(chunk.text)
                elif kind is ToolCallArgumentsDelta:
                    output.append(chunk.delta)
                elif kind is UsageChunk:
                    usage = chunk.usage
                    yield chunk
                    continue
                elif kind is Done:
                    outcome = "ok"
                    yield chunk
                    continue
                elif kind is ProviderStateChunk:
                    yield chunk
                    continue
                if first is None:
                    first = time.perf_counter()
                yield chunk
        except ProviderError as exc:
            outcome, error = "error", exc
            raise
        finally:
            end = time.perf_counter()
            with contextlib.suppress(Exception):
                await chunks.aclose()
            notify(
                ProviderCall(
                    preset=self.preset,
                    provider=self.name,
                    model=self.model,
                    scope=scope,
                    started_at=started_at,
                    latency_s=end - start,
                    ttft_s=None if first is None else first - start,
                    usage=usage,
                    outcome=outcome,
                    error=error,
                    request=request,
                    output_text="" if usage is not None else "".join(output),
                )
            )

    async def aclose(self) -> None:
        await self.inner.aclose()
