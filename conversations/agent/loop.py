"""The agent loop: provider stream → turn events, tool calls → tool results, bounded (seed 003 §8.1).

Pure (no Django, no channel layer): :class:`AgentLoop` consumes ``ProviderChunk``s, reports
display facts as ``TurnEvent``s through ``emit``, runs each response's tool calls
(``tool_calls``) and returns every message the turn produced as an :class:`AgentResult`. It never
touches storage or sinks; the executor owns lifecycle and commit. Its rules — iterations, cancel,
stale state, the context budget of a growing turn, the output cap, call caps and unnamed calls —
are listed in ``agent/README.md``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from conversations.agent.overflow_sizing import RequestFitter, refit_request, same_request
from conversations.agent.tool_calls import display_arguments, run_tool_calls, sendable_names, unique_ids
from conversations.agent.tool_registry import DEFAULT_MAX_ARGUMENT_BYTES, ToolRegistry
from delivery.events import (
    ReasoningDelta,
    TextDelta,
    TextSegmentFinished,
    ToolStarted,
    TurnEvent,
)
from providers.base import LLMProvider, StreamAccumulator
from providers.chunks import Done, ProviderChunk
from providers.chunks import ReasoningDelta as ReasoningChunk
from providers.chunks import TextDelta as TextChunk
from providers.errors import ContextOverflowError, ProviderError, ResponseTooLongError
from providers.messages import Message, Usage
from providers.types import ProviderRequest, ToolCall
from providers.unicode_text import SurrogateMender, mend_error

log = logging.getLogger(__name__)

DEFAULT_MAX_CALLS_PER_RESPONSE = 64
"""Tool calls of one model response that run, at most (``PICOBOT_MAX_TOOL_CALLS_PER_RESPONSE``)."""
DEFAULT_MAX_TURN_OUTPUT_CHARS = 1_000_000
"""Characters of answer text + reasoning one turn may stream, over all its iterations
(``PICOBOT_MAX_TURN_OUTPUT_CHARS``). A frame holds the turn's text once, sent as UTF-8 JSON
(``ensure_ascii=False``): at most 6 bytes a character (a ``\\u0001`` escape), so about 6 MB, under
the WebSocket's 9 MiB payload limit (``serve.MAX_WS_MESSAGE_BYTES``)."""


@dataclass
class TurnMessage:
    """A message the turn produced, with the model iteration it belongs to (0-based)."""

    iteration: int
    message: Message


@dataclass
class AgentResult:
    """What a turn produced.

    ``messages`` are complete assistant/tool messages in order. When the provider failed,
    ``error`` is set and ``partial`` holds the assistant text (with its reasoning) shown before
    the failure (to be kept as ``interrupted``; seed 003 §14.2), or None when no answer text was
    shown; after a cancel the executor sets ``partial`` itself, reasoning alone included
    (``AgentLoop.partial_message``). ``shown_before_error`` is set when the failed response had shown text or reasoning
    (reasoning alone is no ``partial``, but the user saw it: such a response cannot be retried
    unnoticed). ``stale`` is set when the loop stopped because its owner no longer holds the
    dialog (seed 003 §8.3): such a result must be neither committed nor published.
    ``refused_shortened`` is set when ``error`` is a context overflow of a request that had been
    shortened to fit (``fit``); unset when the refused request was the turn's messages as they
    are (nothing could be cut, or nothing was tried), so the failure's wording stays true.
    """

    messages: list[TurnMessage] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    error: ProviderError | None = None
    partial: TurnMessage | None = None
    shown_before_error: bool = False
    iterations: int = 0
    stale: bool = False
    refused_shortened: bool = False

    @property
    def final_text(self) -> str:
        """The last assistant message's text ("" when the model gave none)."""
        for item in reversed(self.messages):
            if item.message.role == "assistant":
                return item.message.text
        return ""


class AgentLoop:
    """Runs one turn's model/tool iterations.

    Args:
        provider: the LLM provider (``stream`` raises ``ProviderError`` after partial chunks).
        tools: the tool registry.
        emit: receives display facts (``TurnEvent``); must be cheap and non-blocking.
        max_iterations: model requests per turn, ≥ 1.
        tool_timeout: seconds per tool call (a tool's own timeout wins).
        is_current: the owner's stale-state check (generation / lease epoch, seed 003 §8.3),
            asked before each provider request and after each tool batch: a bool, or an
            awaitable one (an owner that waits until storage can tell); None means always current.
        fitter: fits each request after the first to the context window, gives every request
            its ``max_tokens`` and sizes the retry after an overflow (``TurnInputBuilder``;
            ``agent/README.md``); None sends the turn's messages as they are.
        max_calls_per_response: tool calls of one model response that run; the calls after them
            (in the model's order) are dropped from the response — not run, stored, shown or
            sent back — and the last kept call's result gets a note saying how many were
            dropped, so a runaway response can neither start thousands of calls nor fill the
            history with their error results (the model may call them again).
        max_output_chars: characters (code points) of answer text + reasoning the whole turn
            may stream, ≥ 1; past it the turn ends with ``ResponseTooLongError`` after showing
            the part that fits (``agent/README.md``).
    """

    def __init__(
        self,
        provider: LLMProvider,
        tools: ToolRegistry,
        emit: Callable[[TurnEvent], object],
        *,
        max_iterations: int = 8,
        tool_timeout: float = 30.0,
        is_current: Callable[[], bool | Awaitable[bool]] | None = None,
        fitter: RequestFitter | None = None,
        max_calls_per_response: int = DEFAULT_MAX_CALLS_PER_RESPONSE,
        max_output_chars: int = DEFAULT_MAX_TURN_OUTPUT_CHARS,
    ) -> None:
        self.provider = provider
        self.max_output_chars = max(1, max_output_chars)
        self._output_chars = 0  # text + reasoning characters the turn has taken so far
        self.max_calls_per_response = max(1, max_calls_per_response)
        self.fitter = fitter
        self.tools = tools
        self._sink = emit
        self.is_current = is_current
        self.max_iterations = max(1, max_iterations)
        self.tool_timeout = tool_timeout
        self.result = AgentResult()
        """The turn so far; still readable after ``run`` was cancelled (``/stop``, a deadline)."""
        self._streaming: StreamAccumulator | None = None
        self._streaming_iteration = 0
        self._shown = False  # the response being streamed showed text or reasoning
        self._task: asyncio.Task | None = None

    def emit(self, event: TurnEvent) -> None:
        """Report a display fact, unless the turn is being cancelled (seed 003 §14.1: late events
        are dropped once the emitter is closed)."""
        if not self._closed():
            self._sink(event)

    def _closed(self) -> bool:
        """Whether the task running :meth:`run` is being cancelled (``/stop``, a deadline)."""
        task = self._task
        return task is not None and task.cancelling() > 0

    async def _current(self) -> bool:
        if self.is_current is None:
            return True
        current = self.is_current()
        if inspect.isawaitable(current):
            current = await current
        return bool(current)

    def partial_message(self, *, reasoning_alone: bool = False) -> TurnMessage | None:
        """What the user saw of the response being streamed now, or None.

        After a cancel or a provider failure this is the unfinished response's shown answer text
        with its reasoning; complete responses are already in ``result.messages``. Without answer
        text (whitespace is none) it is None — after a failure, reasoning alone is no answer and
        is not kept (seed 003 §14.2) — unless ``reasoning_alone``: a stopped turn keeps the
        reasoning it showed as an assistant message without text (``/stop`` keeps what was
        shown: agent/README.md "Cancel"). None when nothing was shown.
        """
        if self._streaming is None:
            return None
        partial = self._streaming.result()
        has_text = bool(partial.text.strip())
        has_reasoning = bool(partial.reasoning and partial.reasoning.strip())
        if not has_text and not (reasoning_alone and has_reasoning):
            return None
        message = Message.assistant(
            text=partial.text if has_text else "", reasoning=partial.reasoning or None
        )
        return TurnMessage(self._streaming_iteration, message)

    async def run(self, messages: list[Message]) -> AgentResult:
        """Run the turn on ``messages`` (system first). Never raises ``ProviderError``.

        Raises:
            ToolFatalError: a tool said the turn cannot go on.
            asyncio.CancelledError: the turn was cancelled (``/stop``).
        """
        result = self.result = AgentResult()
        self._task = asyncio.current_task()
        self._output_chars = 0
        conversation = list(messages)
        seen_call_ids: set[str] = set()
        window: int | None = None  # after an overflow at a later iteration: what later requests fit
        refitted = False  # one retry after an overflow per turn
        for iteration in range(self.max_iterations):
            if not await self._current():  # stale-state check before the provider call (seed 003 §8.3)
                result.stale = True
                return result
            result.iterations = iteration + 1
            last = iteration == self.max_iterations - 1
            tools = [] if last else self.tools.definitions()
            # A copy: the request must not change when this turn appends to its conversation.
            outgoing = list(conversation)
            if iteration and self.fitter is not None:
                outgoing = self.fitter.fit(outgoing, window=window)
            counted = self._output_chars
            while True:
                self._output_chars = counted  # a request sent once more starts its count over
                accumulator = self._streaming = StreamAccumulator()
                self._streaming_iteration = iteration
                self._shown = False
                budget = self.fitter.output_budget(outgoing) if self.fitter is not None else None
                request = ProviderRequest(messages=outgoing, tools=tools, max_tokens=budget)
                try:
                    await self._stream(request, iteration, accumulator)
                except ContextOverflowError as exc:
                    retry = (
                        None
                        if refitted
                        else self._refit_after_overflow(exc, conversation, outgoing, iteration)
                    )
                    if retry is not None:
                        (outgoing, window), refitted = retry, True
                        continue
                    result.refused_shortened = not same_request(outgoing, conversation)
                    return self._failed(exc)
                except ProviderError as exc:
                    return self._failed(exc)
                break
            self._streaming = None
            response = accumulator.result()
            if response.usage is not None:
                result.usage = result.usage + response.usage
            result.finish_reason = response.finish_reason
            # The last request offered no tools; calls the model makes anyway are not run, so the
            # turn ends on its answer instead of on tool results nobody reads.
            calls = [] if last else response.tool_calls
            dropped = max(0, len(calls) - self.max_calls_per_response)
            if dropped:
                calls = calls[: self.max_calls_per_response]
                log.warning(
                    "a response made %d tool calls; the %d over the cap of %d were dropped",
                    len(response.tool_calls),
                    dropped,
                    self.max_calls_per_response,
                )
            calls = unique_ids(calls, seen_call_ids)
            calls, as_called = sendable_names(calls)
            response.tool_calls = calls
            assistant = response.to_message(max_argument_bytes=self._max_argument_bytes())
            result.messages.append(TurnMessage(iteration, assistant))
            conversation.append(assistant)
            if not calls:
                return result
            self.emit(TextSegmentFinished(iteration=iteration))
            conversation.extend(await self._run_tools(calls, iteration, dropped=dropped, as_called=as_called))
            if not await self._current():  # stale-state check after each tool batch (seed 003 §8.3)
                result.stale = True
                return result
        return result

    def _max_argument_bytes(self) -> int:
        """The registry's bound of one call's argument text (UTF-8 bytes)."""
        return int(getattr(self.tools, "max_argument_bytes", DEFAULT_MAX_ARGUMENT_BYTES))

    def _failed(self, error: ProviderError) -> AgentResult:
        """End the turn on a provider failure, keeping what the failed response showed."""
        result = self.result
        result.error = error
        result.partial = self.partial_message()
        result.shown_before_error = self._shown
        return result

    def _refit_after_overflow(
        self, error: ContextOverflowError, conversation: list[Message], sent: list[Message], iteration: int
    ) -> tuple[list[Message], int | None] | None:
        """``(request, window)`` to send once more after a context overflow at ``iteration``, or None:
        only a later iteration's (the first request belongs to the input builder's recovery), only
        when it showed nothing yet (the caller allows one per turn); sized by ``refit_request``."""
        if iteration == 0 or self.fitter is None or self._shown:
            return None
        return refit_request(self.fitter, error, conversation, sent)

    async def _stream(self, request: ProviderRequest, iteration: int, accumulator: StreamAccumulator) -> None:
        stream = self.provider.stream(request)
        # Surrogate pairs split across deltas are rejoined, lone halves replaced, before anything
        # is shown or kept (a lone surrogate cannot be stored, sent or framed: unicode_text).
        mend = SurrogateMender()
        try:
            async for received in stream:
                if self._closed():
                    # A stream that swallowed our cancellation: its late chunk is neither shown nor
                    # kept, and the cancellation goes on (seed 003 §14.1).
                    raise asyncio.CancelledError
                chunk = mend.mend(received)
                if chunk is None:
                    continue
                for held in mend.finish() if isinstance(chunk, Done) else ():
                    self._take(held, iteration, accumulator)
                self._take(chunk, iteration, accumulator)
        except ProviderError as exc:
            mend_error(exc)  # its message may be shown and is logged: no lone surrogates
            raise
        finally:
            await stream.aclose()

    def _take(self, chunk: ProviderChunk, iteration: int, accumulator: StreamAccumulator) -> None:
        """Keep one chunk of the response being streamed, and show its text.

        Raises:
            ResponseTooLongError: the chunk's text or reasoning passed the turn's output cap;
                the part that fits was kept and shown first (``agent/README.md``).
        """
        over = False
        if isinstance(chunk, TextChunk | ReasoningChunk):
            room = self.max_output_chars - self._output_chars
            if len(chunk.text) > room:
                over = True
                chunk = type(chunk)(chunk.text[: max(0, room)])
            self._output_chars += len(chunk.text)
        if not over or chunk.text:
            accumulator.feed(chunk)
            if isinstance(chunk, TextChunk):
                self._shown = self._shown or bool(chunk.text.strip())
                self.emit(TextDelta(iteration=iteration, delta=chunk.text))
            elif isinstance(chunk, ReasoningChunk):
                self._shown = self._shown or bool(chunk.text.strip())
                self.emit(ReasoningDelta(iteration=iteration, delta=chunk.text))
        if over:
            log.warning(
                "a turn streamed more than %d characters of text and reasoning; cut off",
                self.max_output_chars,
            )
            raise ResponseTooLongError(
                f"the answer passed {self.max_output_chars} characters of text and reasoning",
                max_chars=self.max_output_chars,
            )

    async def _run_tools(
        self,
        calls: list[ToolCall],
        iteration: int,
        *,
        dropped: int = 0,
        as_called: dict[str, ToolCall] | None = None,
    ) -> list[Message]:
        """Run one response's calls concurrently (``tool_calls.run_tool_calls``); returns their
        results in call order.

        Each result is recorded in ``result.messages`` (in call order) even when the batch ends
        early: a stop or a ``ToolFatalError`` keeps the results that already came, so the commit
        stores what the user saw (``complete_tool_chains`` fills only the calls still running).
        ``dropped`` calls of this response were over the cap: the last call's result says so.
        ``as_called`` maps a renamed call's id to the call as the model made it (what runs).

        Raises:
            ToolFatalError: a call said the turn cannot go on (the others are cancelled).
            asyncio.CancelledError: the turn is being cancelled; calls that outlive the grace
                are abandoned (``tool_calls.CANCEL_GRACE_SECONDS``).
        """
        max_bytes = self._max_argument_bytes()
        for call in calls:
            self.emit(
                ToolStarted(
                    iteration=iteration,
                    call_id=call.id,
                    name=call.name,
                    arguments=display_arguments(call, max_bytes),
                )
            )
        note = None
        if dropped:
            note = (
                calls[-1].id,
                f"\n\n({dropped} further tool calls of this response were dropped: at most "
                f"{self.max_calls_per_response} run per response)",
            )
        finished: dict[str, Message] = {}
        try:
            await run_tool_calls(
                calls,
                iteration,
                tools=self.tools,
                timeout=self.tool_timeout,
                emit=self.emit,
                closed=self._closed,
                finished=finished,
                as_called=as_called,
                note=note,
            )
        finally:
            self.result.messages.extend(
                TurnMessage(iteration, finished[call.id]) for call in calls if call.id in finished
            )
        return [finished[call.id] for call in calls]
