"""The provider input of a turn, built in one place (seed 000 §7.1, §7.2, §8; seed 002 §6).

:class:`TurnInputBuilder` is the single assembly path of a turn's request — the system prompt
once (with the compaction summary), the history rows after the summary (tool pairs repaired) and
the runtime context (``runtime_context``) once in the last user message — and fits it to the
context budget: old tool results shortened, older history summarised through the model, the
oldest turns left out of this request, in that order. The summary it wrote is committed only
while the dialog's ``state_version`` still matches. Later requests of the turn are fitted by
:meth:`TurnInputBuilder.fit`; one context overflow is recovered by ``overflow``, sized from what
the provider refused (``agent/overflow_sizing.py``, issue 17). The budget ladder and its rules:
``context/README.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from django.conf import settings

from conversations.agent.learned_limits import LEARNED_LIMITS, LearnedLimits
from conversations.agent.overflow_sizing import OverflowRetry, RequestSizing
from conversations.context.auto_compaction import (
    CompactingPhase,
    CompressionUpdate,
    count_failure,
    failure_notice,
    summarise_for_turn,
)
from conversations.context.compaction import should_compact
from conversations.context.compaction_service import CompactionError, commit_auto_summary
from conversations.context.history import build_turn_input
from conversations.context.pruning import drop_oldest_turns, fit_request, microcompact
from conversations.context.runtime_context import MemoryRecall, read_turn_context
from conversations.context.tokens import REQUEST_OVERHEAD, estimate_messages, estimate_tools
from conversations.storage import TurnStart
from conversations.storage.runner import run_storage
from providers.base import LLMProvider
from providers.errors import ContextOverflowError
from providers.messages import Message, ToolDefinition
from providers.presets import ModelPreset

log = logging.getLogger(__name__)

#: Tool results kept whole by the first microcompact pass (the newest ones, errors counted).
KEEP_RECENT_TOOL_RESULTS = 4
#: The start of the message of a turn whose input cannot be made to fit (also after an overflow).
#: It claims no compaction: whether anything was cut is said by the reason after it.
TOO_LONG = "The conversation is too long for the model"
START_OVER = "Send a shorter message, or start a new dialog with /new."


class ContextPreparationError(Exception):
    """The turn's input could not be made to fit the model; nothing was sent.

    Attributes:
        message: what to tell the user (no payloads).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class PreparedInput:
    """A turn's request input (seed 000 §7.1 ``PreparedTurnInput``).

    Attributes:
        messages: the request messages, system first; the runtime context is in the last user
            message.
        base_state_version: the dialog's ``state_version`` this input was built on (after
            :meth:`TurnInputBuilder.commit_compression`: the version its commit produced).
        compression: the automatic compaction to commit, or None.
        estimate: estimated tokens of the request (messages and tool definitions).
        window: the context window, tokens, the input was fitted to.
        pruned_results: tool results shortened in this request (microcompact).
        dropped_messages: old messages left out of this request.
        notices: what the user should be told (a failed compaction, left-out messages).
        committed: the compression was stored.
    """

    messages: list[Message]
    base_state_version: int
    compression: CompressionUpdate | None
    estimate: int
    window: int = 0
    pruned_results: int = 0
    dropped_messages: int = 0
    notices: tuple[str, ...] = ()
    committed: bool = False


def _changed(before: Sequence[Message], after: Sequence[Message]) -> int:
    return sum(1 for a, b in zip(before, after, strict=False) if a is not b)


class TurnInputBuilder:
    """Builds, compacts and (after an overflow) rebuilds a turn's input (``context/README.md``).

    Args:
        provider: the model of the turn (it also writes automatic summaries).
        system_prompt: the system prompt (``PICOBOT.system_prompt``).
        tools: the tool definitions the request offers (counted in the estimate).
        window_tokens: the model's configured context window, tokens (a window its provider
            stated in an overflow error, learned for ``preset``, wins when smaller).
        threshold: share of the window (0–1) a request may use before it is compacted.
        keep_messages: history rows a summary keeps verbatim at most.
        keep_tool_results: tool results the first microcompact pass keeps whole.
        compact_timeout: seconds one summary call may take.
        memory_recall: the memory hook (None: no memory).
        phase: shows the ``compacting`` phase (the turn's ``TurnController``), or None.
        clock: returns the current time (tests).
        preset: the turn's model preset (``""``: none; nothing is learned).
        output_tokens: the preset's output budget per request (``max_tokens``), or None.
        limits: the windows learned per preset (default: the process's store).
    """

    def __init__(
        self,
        provider: LLMProvider,
        *,
        system_prompt: str,
        tools: Sequence[ToolDefinition] = (),
        window_tokens: int = 128000,
        threshold: float = 0.8,
        keep_messages: int = 20,
        keep_tool_results: int = KEEP_RECENT_TOOL_RESULTS,
        compact_timeout: float = 120.0,
        memory_recall: MemoryRecall | None = None,
        phase: CompactingPhase | None = None,
        clock: Callable[[], datetime] | None = None,
        preset: str = "",
        output_tokens: int | None = None,
        limits: LearnedLimits = LEARNED_LIMITS,
    ) -> None:
        self.provider = provider
        self.system_prompt = system_prompt
        self.tools = list(tools)
        self.window_tokens = int(window_tokens)
        self.threshold = float(threshold)
        self.keep_messages = int(keep_messages)
        self.keep_tool_results = int(keep_tool_results)
        self.compact_timeout = float(compact_timeout)
        self.memory_recall = memory_recall
        self.phase = phase
        self.clock = clock or (lambda: datetime.now(UTC))
        self._fixed = REQUEST_OVERHEAD + estimate_tools(self.tools)
        self.sizing = RequestSizing(
            self.estimate,
            window_tokens=self.window_tokens,
            output_tokens=output_tokens,
            preset=preset,
            limits=limits,
        )
        """The turn's window and output budgets, and their sizes after an overflow (issue 17)."""
        self.prepared: PreparedInput | None = None
        """The last input :meth:`prepare`, :meth:`recover_after_overflow` or
        :meth:`commit_compression` returned."""

    @classmethod
    def from_settings(
        cls,
        provider: LLMProvider,
        *,
        tools: Sequence[ToolDefinition] = (),
        memory_recall: MemoryRecall | None = None,
        phase: CompactingPhase | None = None,
        window_tokens: int | None = None,
        preset: ModelPreset | None = None,
    ) -> TurnInputBuilder:
        """A builder configured from ``settings.PICOBOT`` (threshold, keep, timeout); the window
        is ``window_tokens`` (the turn's model preset's) or ``PICOBOT_LLM_CONTEXT_WINDOW``;
        ``preset`` names what is learned from overflows and gives the output budget."""
        config = settings.PICOBOT
        return cls(
            provider,
            system_prompt=config.system_prompt,
            tools=tools,
            window_tokens=window_tokens or config.llm_context_window,
            threshold=config.compact_threshold,
            keep_messages=config.compact_keep_messages,
            compact_timeout=config.compact_timeout,
            memory_recall=memory_recall,
            phase=phase,
            preset=preset.name if preset is not None else "",
            output_tokens=preset.config.max_tokens if preset is not None else config.llm_max_tokens,
        )

    # -- public API ----------------------------------------------------------------------------

    async def prepare(self, start: TurnStart, *, window_tokens: int | None = None) -> PreparedInput:
        """The turn's input, compacted to fit ``window_tokens`` (default: the configured window, or
        the preset's learned one when smaller: ``RequestSizing.window``).

        Raises:
            ContextPreparationError: even the smallest input (the current turn alone, old tool
                results shortened) is estimated over the window.
            django.db.DatabaseError: the dialog's state could not be read (after retries).
        """
        window = self.sizing.window() if window_tokens is None else max(1, int(window_tokens))
        return await self._prepare(start, window, limit=window, recovering=False)

    async def recover_after_overflow(
        self, start: TurnStart, previous: PreparedInput, *, window: int | None = None
    ) -> PreparedInput:
        """Rebuild after the provider reported a context overflow for ``previous`` (seed 000 §7.2).

        The same assembly as :meth:`prepare`, from the compacted state ``previous`` used (its
        compression, committed or not), fitted to ``window`` estimated tokens (what
        :meth:`after_overflow` sized from the refused request; default: half of
        ``previous.estimate``): old tool results are shortened, older history summarised (when
        allowed) and the oldest turns left out, tool pairs kept together. Call it once per turn.

        Raises:
            ContextPreparationError: the input cannot be made smaller than ``previous``.
        """
        base = start
        if previous.compression is not None:
            base = replace(
                start,
                summary=previous.compression.summary,
                summary_seq=previous.compression.covers_seq,
                history=previous.compression.kept_rows,
            )
        window = max(1, previous.estimate // 2 if window is None else window)
        return await self._prepare(base, window, limit=previous.estimate - 1, recovering=True)

    async def commit_compression(self, start: TurnStart, prepared: PreparedInput) -> PreparedInput:
        """Store ``prepared.compression`` if the dialog's state version still matches.

        One conditional UPDATE (``compaction_service.commit_auto_summary``). Returns ``prepared``
        itself when there is nothing to commit or the commit lost (the input stays valid for this
        request); otherwise a copy with ``committed`` set and the new ``base_state_version``.
        """
        update = prepared.compression
        if update is None or prepared.committed:
            return prepared
        version = await run_storage(
            commit_auto_summary,
            start.dialog_id,
            update.summary,
            update.covers_seq,
            update.expected_summary_seq,
            prepared.base_state_version,
        )
        if version is None:
            log.info(
                "dialog %s: automatic compaction discarded (the dialog changed meanwhile)", start.dialog_id
            )
            return prepared
        log.info(
            "dialog %s: compacted automatically up to seq %d (%d rows)",
            start.dialog_id,
            update.covers_seq,
            update.summarised_rows,
        )
        self.prepared = replace(prepared, base_state_version=version, committed=True)
        return self.prepared

    # -- the one assembly path -----------------------------------------------------------------

    def assemble(self, summary: str, rows: list[dict], context: str) -> list[Message]:
        """System prompt (+ summary) once, the repaired rows, the runtime context once."""
        return build_turn_input(self.system_prompt, rows, runtime_context=context, summary=summary)

    def estimate(self, messages: Sequence[Message]) -> int:
        """Estimated tokens of a request of ``messages`` with this builder's tools."""
        return self._fixed + estimate_messages(messages)

    def fit(self, messages: list[Message], *, window: int | None = None) -> list[Message]:
        """A later request of the turn (after tool calls), fitted to the context window.

        The budget is the compaction share of ``window`` estimated tokens (after the provider
        refused a later request: what :meth:`after_overflow` sized), by default of the window
        the turn's input was prepared for (``prepared.window``; smaller after an overflow
        recovery) or the provider's stated one when smaller. ``pruning.fit_request`` shortens
        older tool results, cuts the largest ones with a marker, then leaves old turns out — in
        the request only: ``messages`` and the stored history stay whole. Pure, no I/O.
        """
        sized = window is not None
        if window is None:
            prepared = self.prepared.window if self.prepared is not None and self.prepared.window else 0
            window = min(prepared or self.window_tokens, self.sizing.window())
        budget = max(1, int(window * self.threshold))
        before = self.estimate(messages)
        fitted = fit_request(messages, budget - self._fixed, keep_recent=self.keep_tool_results)
        if len(fitted) != len(messages) or _changed(messages, fitted):
            log.info(
                "a later request fitted%s: about %d → %d estimated tokens (budget %d)",
                " after an overflow" if sized else "",
                before,
                self.estimate(fitted),
                budget,
            )
        return fitted

    def output_budget(self, messages: list[Message]) -> int | None:
        """The ``max_tokens`` of a request of ``messages``: ``RequestSizing.output_budget``."""
        return self.sizing.output_budget(messages)

    def after_overflow(self, error: ContextOverflowError, refused: list[Message]) -> OverflowRetry:
        """How to send ``refused`` once more: ``RequestSizing.after_overflow`` (issue 17)."""
        return self.sizing.after_overflow(error, refused)

    async def _prepare(self, start: TurnStart, window: int, *, limit: int, recovering: bool) -> PreparedInput:
        dialog, context = await read_turn_context(
            start, reread=recovering, memory_recall=self.memory_recall, now=self.clock
        )
        target = max(1, int(window * self.threshold))
        summary, rows = start.summary, start.history
        messages = self.assemble(summary, rows, context)
        estimate = self.estimate(messages)
        compression: CompressionUpdate | None = None
        notices: list[str] = []
        pruned = dropped = 0
        if estimate > target:  # 1. shorten old successful tool results (this request only)
            shortened, _ = microcompact(messages, self.keep_tool_results)
            pruned = _changed(messages, shortened)
            messages, estimate = shortened, self.estimate(shortened)
        failures = dialog.auto_compact_failures
        if should_compact(estimate, window, self.threshold, failures=failures) and not self.provider.offline:
            try:  # 2. summarise older history through the model (an oversized summary is refused)
                compression = await summarise_for_turn(
                    start,
                    self.provider,
                    summary,
                    rows,
                    target=target,
                    keep_messages=self.keep_messages,
                    fixed=self._fixed,
                    timeout=self.compact_timeout,
                    phase=self.phase,
                )
            except CompactionError as exc:
                failures = await count_failure(start, failures)
                notices.append(failure_notice(exc, failures))
            if compression is not None:
                summary, rows = compression.summary, compression.kept_rows
                messages = self.assemble(summary, rows, context)
                shortened, _ = microcompact(messages, self.keep_tool_results)
                pruned = _changed(messages, shortened)
                messages, estimate = shortened, self.estimate(shortened)
        if estimate > target:  # 3. shorten every old successful tool result first …
            shortened, _ = microcompact(messages, 0)
            pruned += _changed(messages, shortened)
            messages, estimate = shortened, self.estimate(shortened)
            if estimate > target:  # … and only then leave the oldest turns out of this request
                messages, dropped = drop_oldest_turns(messages, target - self._fixed)
                estimate = self.estimate(messages)
        if estimate > limit:
            log.warning(
                "dialog %s: the input is estimated at %d tokens, over the %d-token %s",
                start.dialog_id,
                estimate,
                limit,
                "retry limit" if recovering else "context window",
            )
            if recovering:
                reason = f"the model refused about {limit + 1:,} tokens and the input cannot be made smaller"
            else:
                reason = (
                    f"its newest message alone is estimated at about {estimate:,} tokens, over the model's "
                    f"context window of {window:,}"
                )
            raise ContextPreparationError(f"{TOO_LONG}: {reason}. {START_OVER}")
        if dropped and not notices:
            text = (
                f"{dropped} older message(s) were left out of the model's input for this turn: the "
                "conversation does not fit its context window."
            )
            if compression is None:  # right after a compaction, /compact would not help
                text += " /compact summarises the history instead."
            notices.append(text)
        self.prepared = PreparedInput(
            messages=messages,
            base_state_version=dialog.state_version,
            compression=compression,
            estimate=estimate,
            window=window,
            pruned_results=pruned,
            dropped_messages=dropped,
            notices=tuple(notices),
        )
        return self.prepared
