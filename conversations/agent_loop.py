"""The agent loop: provider stream → turn events, tool calls → tool results, bounded (seed 003 §8.1).

Pure (no Django, no channel layer): it consumes ``ProviderChunk``s, reports display facts as
``TurnEvent``s through ``emit``, runs tools through the registry, and returns every message the
turn produced. It never touches storage or sinks; the executor owns lifecycle and commit.

Rules: the model's ``tool_call_id`` is carried unchanged to the tool result (seed 002 FIX-A);
``TextSegmentFinished`` closes a text segment before tools start; calls of one model response
run concurrently, each with a timeout; at most ``max_iterations`` model requests per turn (the
last one is sent without tools so the model has to answer).

Cancel (seed 003 §14.1): once the task running :meth:`AgentLoop.run` is being cancelled, the
emitter is closed — a late chunk (a stream that swallowed the cancellation) or a late tool event
is dropped, and the cancellation goes on. The partial kept for history is the shown *answer
text* only: reasoning alone is no answer and is not kept.

Stale state (seed 003 §8.3): with ``is_current``, the loop checks that its owner still holds the
dialog before every provider request and after every tool batch; when not, it stops at once with
``result.stale`` set and emits nothing more (the executor then cancels the turn silently).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from conversations.tools.registry import ToolFatalError, ToolRegistry
from delivery.events import (
    ReasoningDelta,
    TextDelta,
    TextSegmentFinished,
    ToolFinished,
    ToolStarted,
    TurnEvent,
)
from providers.base import LLMProvider, ProviderRequest, StreamAccumulator, ToolCall
from providers.chunks import ReasoningDelta as ReasoningChunk
from providers.chunks import TextDelta as TextChunk
from providers.errors import ProviderError
from providers.messages import Message, Usage


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
    shown. ``stale`` is set when the loop stopped because its owner no longer holds the dialog
    (seed 003 §8.3): such a result must be neither committed nor published.
    """

    messages: list[TurnMessage] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    error: ProviderError | None = None
    partial: TurnMessage | None = None
    iterations: int = 0
    stale: bool = False

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
        is_current: the owner's cheap, synchronous stale-state check (generation / lease epoch,
            seed 003 §8.3), asked before each provider request and after each tool batch; None
            means always current.
    """

    def __init__(
        self,
        provider: LLMProvider,
        tools: ToolRegistry,
        emit: Callable[[TurnEvent], object],
        *,
        max_iterations: int = 8,
        tool_timeout: float = 30.0,
        is_current: Callable[[], bool] | None = None,
    ) -> None:
        self.provider = provider
        self.tools = tools
        self._sink = emit
        self.is_current = is_current
        self.max_iterations = max(1, max_iterations)
        self.tool_timeout = tool_timeout
        self.result = AgentResult()
        """The turn so far; still readable after ``run`` was cancelled (``/stop``, a deadline)."""
        self._streaming: StreamAccumulator | None = None
        self._streaming_iteration = 0
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

    def _current(self) -> bool:
        return self.is_current is None or bool(self.is_current())

    def partial_message(self) -> TurnMessage | None:
        """The shown answer text (with its reasoning) of the response being streamed now, or None.

        After a cancel or a provider failure this is what the user saw of the unfinished
        response; complete responses are already in ``result.messages``. None when no answer
        text was shown — whitespace or reasoning alone is no answer, and nothing of it is kept
        (seed 003 §14.1: no assistant text → no assistant row; §14.2: no assistant history).
        """
        if self._streaming is None:
            return None
        partial = self._streaming.result()
        if not partial.text.strip():
            return None
        message = Message.assistant(text=partial.text, reasoning=partial.reasoning or None)
        return TurnMessage(self._streaming_iteration, message)

    async def run(self, messages: list[Message]) -> AgentResult:
        """Run the turn on ``messages`` (system first). Never raises ``ProviderError``.

        Raises:
            ToolFatalError: a tool said the turn cannot go on.
            asyncio.CancelledError: the turn was cancelled (``/stop``).
        """
        result = self.result = AgentResult()
        self._task = asyncio.current_task()
        conversation = list(messages)
        seen_call_ids: set[str] = set()
        for iteration in range(self.max_iterations):
            if not self._current():  # stale-state check before the provider call (seed 003 §8.3)
                result.stale = True
                return result
            result.iterations = iteration + 1
            last = iteration == self.max_iterations - 1
            # A copy: the request must not change when this turn appends to its conversation.
            request = ProviderRequest(messages=list(conversation), tools=[] if last else self.tools.definitions())
            accumulator = self._streaming = StreamAccumulator()
            self._streaming_iteration = iteration
            try:
                await self._stream(request, iteration, accumulator)
            except ProviderError as exc:
                result.error = exc
                result.partial = self.partial_message()
                return result
            self._streaming = None
            response = accumulator.result()
            if response.usage is not None:
                result.usage = result.usage + response.usage
            result.finish_reason = response.finish_reason
            # The last request offered no tools; calls the model makes anyway are not run, so the
            # turn ends on its answer instead of on tool results nobody reads.
            calls = [] if last else self._unique_ids(response.tool_calls, seen_call_ids)
            response.tool_calls = calls
            assistant = response.to_message()
            result.messages.append(TurnMessage(iteration, assistant))
            conversation.append(assistant)
            if not calls:
                return result
            self.emit(TextSegmentFinished(iteration=iteration))
            for tool_message in await self._run_tools(calls, iteration):
                result.messages.append(TurnMessage(iteration, tool_message))
                conversation.append(tool_message)
            if not self._current():  # stale-state check after each tool batch (seed 003 §8.3)
                result.stale = True
                return result
        return result

    async def _stream(self, request: ProviderRequest, iteration: int, accumulator: StreamAccumulator) -> None:
        stream = self.provider.stream(request)
        try:
            async for chunk in stream:
                if self._closed():
                    # A stream that swallowed our cancellation: its late chunk is neither shown nor
                    # kept, and the cancellation goes on (seed 003 §14.1).
                    raise asyncio.CancelledError
                accumulator.feed(chunk)
                if isinstance(chunk, TextChunk):
                    self.emit(TextDelta(iteration=iteration, delta=chunk.text))
                elif isinstance(chunk, ReasoningChunk):
                    self.emit(ReasoningDelta(iteration=iteration, delta=chunk.text))
        finally:
            await stream.aclose()

    @staticmethod
    def _unique_ids(calls: list[ToolCall], seen: set[str]) -> list[ToolCall]:
        """The calls with an id each that is unique within the turn.

        Some OpenAI-compatible servers send empty ids, or reuse ``call_0`` in every response; a
        result must pair with exactly one call, so such ids are replaced (consistently in the
        assistant message and the tool result, which is all the provider sees).
        """
        out = []
        for call in calls:
            if not call.id or call.id in seen:
                call = ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=call.name, arguments_json=call.arguments_json)
            seen.add(call.id)
            out.append(call)
        return out

    async def _run_tools(self, calls: list[ToolCall], iteration: int) -> list[Message]:
        for call in calls:
            self.emit(ToolStarted(iteration=iteration, call_id=call.id, name=call.name, arguments=_display_args(call)))

        async def one(call: ToolCall) -> Message:
            outcome = await self.tools.run(call, self.tool_timeout)
            self.emit(
                ToolFinished(iteration=iteration, call_id=call.id, success=not outcome.is_error, preview=outcome.preview)
            )
            return Message.tool_result(call.id, outcome.content, is_error=outcome.is_error, tool_name=call.name)

        # A TaskGroup cancels the sibling calls when one raises (ToolFatalError, cancellation).
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(call)) for call in calls]
        except* ToolFatalError as failures:
            raise failures.exceptions[0] from None
        return [task.result() for task in tasks]


def _display_args(call: ToolCall) -> dict | str:
    try:
        return call.arguments()
    except ValueError:
        return call.arguments_json
