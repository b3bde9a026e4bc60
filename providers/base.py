"""The provider interface and the pure stream assembly (seed 003 §7.1).

``LLMProvider.stream()`` is the one path to a model; ``collect()`` builds a whole
:class:`~providers.types.AssistantResponse` from the same stream with a
:class:`StreamAccumulator` (titles, compaction), so there is no second, non-streaming HTTP path.
The request and response values live in :mod:`providers.types`, the hooks in
:mod:`providers.hooks`.

Tool calls from unfinished streams: chunks are yielded as they arrive (so the UI can show a call
being prepared), but a call is final only once ``Done`` arrives. The accumulator therefore
reports tool calls only for a stream that ended with ``Done``; after a failure
(:meth:`StreamAccumulator.fail`) ``result().tool_calls`` is ``[]`` and the abandoned calls are
available for diagnostics only (cases SC-19, SC-27: never run a half-streamed call).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from providers.chunks import (
    Done,
    ProviderChunk,
    ProviderStateChunk,
    ReasoningDelta,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
    UsageChunk,
)
from providers.errors import ProviderError
from providers.hooks import HookContext, ProviderHooks
from providers.messages import Usage
from providers.types import AssistantResponse, ProviderRequest, ToolCall
from providers.unicode_text import fix_surrogates


class _CallParts:
    __slots__ = ("id", "name", "parts")

    def __init__(self, id_: str, name: str) -> None:
        self.id = id_
        self.name = name
        self.parts: list[str] = []


class StreamAccumulator:
    """Assembles a chunk stream into an :class:`AssistantResponse` (a pure "parts manager").

    O(1) amortised per chunk: deltas go to lists that are joined in :meth:`result`.

    Raises (from :meth:`feed`):
        ValueError: impossible input: arguments for a call index never started, a conflicting
            id/name for a started index, or any chunk after ``Done``.
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _CallParts] = {}
        self._usage: Usage | None = None
        self._state: dict[str, Any] | None = None
        self._done: Done | None = None
        self._error: ProviderError | None = None

    @property
    def done(self) -> bool:
        """Whether ``Done`` was fed (the stream succeeded)."""
        return self._done is not None

    def feed(self, chunk: ProviderChunk) -> None:
        """Add one chunk."""
        if self._done is not None:
            raise ValueError(f"chunk after Done: {chunk!r}")
        if isinstance(chunk, TextDelta):
            self._text.append(chunk.text)
        elif isinstance(chunk, ReasoningDelta):
            self._reasoning.append(chunk.text)
        elif isinstance(chunk, ToolCallArgumentsDelta):
            call = self._calls.get(chunk.index)
            if call is None:
                raise ValueError(f"arguments for tool call index {chunk.index}, which never started")
            call.parts.append(chunk.delta)
        elif isinstance(chunk, ToolCallStart):
            self._start_call(chunk)
        elif isinstance(chunk, UsageChunk):
            self._usage = chunk.usage
        elif isinstance(chunk, ProviderStateChunk):
            self._state = chunk.state
        elif isinstance(chunk, Done):
            self._done = chunk
        else:
            raise ValueError(f"not a provider chunk: {chunk!r}")

    def _start_call(self, chunk: ToolCallStart) -> None:
        call = self._calls.get(chunk.index)
        if call is None:
            self._calls[chunk.index] = _CallParts(chunk.id, chunk.name)
            return
        for attr in ("id", "name"):
            new, old = getattr(chunk, attr), getattr(call, attr)
            if new and old and new != old:
                raise ValueError(f"tool call index {chunk.index} changed {attr} from {old!r} to {new!r}")
            if new and not old:
                setattr(call, attr, new)

    def fail(self, error: ProviderError) -> None:
        """Record the failure that ended the stream (tool calls are then not reported)."""
        self._error = error

    def _assembled_calls(self) -> list[ToolCall]:
        return [
            ToolCall(call.id or f"call_{uuid.uuid4().hex[:24]}", call.name, "".join(call.parts))
            for call in self._calls.values()
        ]

    def unfinished_tool_calls(self) -> list[ToolCall]:
        """Calls of a stream that did not finish (diagnostics only; never run them)."""
        return [] if self._done is not None else self._assembled_calls()

    def result(self) -> AssistantResponse:
        """The response so far: complete on success, partial after :meth:`fail`.

        Text and reasoning are joined once here, so a surrogate pair split across deltas is
        rejoined and a lone half becomes U+FFFD (``unicode_text.fix_surrogates``; O(1) per delta
        while streaming).
        """
        reasoning = fix_surrogates("".join(self._reasoning))
        if self._done is not None:
            finish_reason = self._done.finish_reason
        else:
            finish_reason = self._error.finish_reason if self._error is not None else None
        return AssistantResponse(
            text=fix_surrogates("".join(self._text)),
            reasoning=reasoning or None,
            tool_calls=self._assembled_calls() if self._done is not None else [],
            usage=self._usage,
            finish_reason=finish_reason,
            provider_state=self._state,
            error=self._error,
        )


class LLMProvider(ABC):
    """A streaming chat model.

    Subclasses implement :meth:`_stream`; callers use :meth:`stream` (or :meth:`collect`),
    which runs the provider's :attr:`hooks` around it (:mod:`providers.hooks`).

    Attributes:
        name: ``"openai"``, ``"anthropic"``, ``"replay"`` (also the ``provider`` key of the
            replay state it produces).
        model: the model id sent to the vendor.
        offline: True for providers that never reach a real model (the UI labels them).
        endpoint: the normalised API endpoint (:func:`~providers.replay_identity.normalise_endpoint`
            of the base URL) for HTTP providers, None for others. With ``name`` it is the
            replay identity: ``provider_state`` goes back only to a provider with the same
            ``(name, endpoint)`` (:func:`~providers.replay_identity.replays_to`, seed 003 §6.2).
    """

    name: str
    model: str
    offline: bool = False
    endpoint: str | None = None

    @property
    def hooks(self) -> ProviderHooks:
        """This provider's pre-request / post-request / on-error hooks (created on first use)."""
        hooks = self.__dict__.get("_hooks")
        if hooks is None:
            hooks = self.__dict__["_hooks"] = ProviderHooks()
        return hooks

    def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        """Stream one model response (an async generator; network I/O).

        Yields chunks as they arrive and ends with ``Done`` on success. On failure it raises a
        :class:`~providers.errors.ProviderError` *after* yielding the partial chunks;
        :class:`~providers.errors.RequestBlockedError` (before any chunk) when a pre-request
        hook refused the call. Closing the generator early (``aclose()``, cancellation) closes
        the HTTP response.
        """
        hooks = self.__dict__.get("_hooks")
        if not hooks:  # the common case costs nothing
            return self._stream(request)
        return self._hooked_stream(hooks, request)

    @abstractmethod
    def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        """The provider's own stream (the contract of :meth:`stream`, without hooks)."""

    async def _hooked_stream(
        self, hooks: ProviderHooks, request: ProviderRequest
    ) -> AsyncIterator[ProviderChunk]:
        ctx = HookContext(provider=self.name, model=self.model, request=request)
        acc = StreamAccumulator() if hooks.wants_response else None
        try:
            await hooks.run_pre_request(ctx)
            chunks = self._stream(request)
            try:
                async for chunk in chunks:
                    if acc is not None:
                        acc.feed(chunk)
                        if isinstance(chunk, Done):
                            # Before the caller sees Done, so a caller that stops there still
                            # has its response observed.
                            await hooks.run_post_request(ctx, acc.result())
                    yield chunk
            finally:
                aclose = getattr(chunks, "aclose", None)
                if aclose is not None:
                    await aclose()
        except ProviderError as exc:
            await hooks.run_on_error(ctx, exc)
            raise

    async def collect(self, request: ProviderRequest) -> AssistantResponse:
        """The whole response of :meth:`stream`.

        Raises:
            ProviderError: the stream failed (the partial response is discarded).
        """
        acc = StreamAccumulator()
        chunks = self.stream(request)
        try:
            async for chunk in chunks:
                acc.feed(chunk)
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        return acc.result()

    async def aclose(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release network resources (idempotent)."""

    async def __aenter__(self) -> LLMProvider:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
