"""The provider input of a turn, built in one place (seed 000 §7.1, §7.2, §8; seed 002 §6).

:class:`TurnInputBuilder` is the single assembly path of a turn's request: the system prompt
once (with the compaction summary), the history rows after the summary (tool pairs repaired),
and the runtime context — time, channel, dialog title, the dialog's active plan and recalled
memory — appended once to the last user message (``history.build_turn_input``; DESIGN §6). The
active plan (``models.Plan``) and memory recall (a hook; none by default) are fetched
concurrently (seed 000 §8: ``tokio::join!`` → ``asyncio.gather``).

Context budget (seed 002 §6, DESIGN §6). The request is estimated (``conversations.context.tokens``) and
compared with ``share × window`` tokens (``PICOBOT_COMPACT_THRESHOLD`` ×
``PICOBOT_LLM_CONTEXT_WINDOW``). Past it, in order, until it fits:

1. ``compaction.microcompact``: old successful tool results are shortened to a marker in this
   request only (never stored; error results are never touched).
2. Automatic summary compaction through the provider (``compaction_service.summarise_rows``,
   bounded by ``PICOBOT_COMPACT_TIMEOUT`` s, tool pairs kept together), unless the provider is
   the offline replay or the dialog's ``auto_compact_failures`` reached
   ``compaction.MAX_CONSECUTIVE_FAILURES``. Meanwhile the turn's phase is ``compacting``. The
   result is a :class:`CompressionUpdate` that :meth:`TurnInputBuilder.commit_compression`
   stores only while the dialog's ``state_version`` is still ``base_state_version``. A failure
   is counted on the dialog and told in a notice; the turn goes on.
   A summary too large to use (``compaction.summary_too_large``: over half the budget) is
   rejected like a failed one — neither used nor stored — and the turn goes on without it.
3. Every old successful tool result is shortened (``microcompact(…, 0)``), and only if that is
   still not enough ``compaction.drop_oldest_turns`` leaves the oldest whole turns out of this
   request.

If the request is still over the window itself, :class:`ContextPreparationError` fails the turn
with a clear message; a storage error while building it fails the turn typed
``context_preparation`` (:func:`run_with_overflow_recovery`).

Later requests of the turn (after tool calls) are fitted by :meth:`TurnInputBuilder.fit`, which
the agent loop calls before each of them (``compaction.fit_request``: request-only).

Overflow recovery (seed 000 §7.2): :meth:`TurnInputBuilder.recover_after_overflow` runs the same
path again from the compacted state with half the overflowing request's estimate as the window,
so the retried request is smaller and still has the system prompt and the runtime context
exactly once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

from django.conf import settings
from django.db import DatabaseError

from conversations.agent.failures import TurnFailedError, TurnFailure, TurnFailureKind
from conversations.agent.loop import AgentResult
from conversations.context.compaction import (
    MAX_CONSECUTIVE_FAILURES,
    choose_boundary,
    drop_oldest_turns,
    fit_request,
    microcompact,
    rows_to_keep,
    should_compact,
)
from conversations.context.compaction_service import (
    CompactionError,
    commit_auto_summary,
    record_auto_compact_failure,
    summarise_rows,
)
from conversations.context.history import build_turn_input
from conversations.context.tokens import REQUEST_OVERHEAD, estimate_messages, estimate_tools
from conversations.storage import TurnStart, sql
from conversations.storage.runner import run_storage
from conversations.tools.plan import plan_from_row, render_plan
from providers.base import LLMProvider
from providers.errors import ContextOverflowError
from providers.messages import Message, ToolDefinition
from providers.unicode_text import fix_surrogates

log = logging.getLogger(__name__)

#: Tool results kept whole by the first microcompact pass (the newest ones, errors counted).
KEEP_RECENT_TOOL_RESULTS = 4
#: The rendered active plan (``tools.plan.render_plan``) is cut after this many characters.
MAX_PLAN_CHARS = 4000
#: Recalled memory is cut after this many characters.
MAX_MEMORY_CHARS = 4000
#: The start of the message of a turn whose input cannot be made to fit (also after an overflow).
#: It claims no compaction: whether anything was cut is said by the reason after it.
TOO_LONG = "The conversation is too long for the model"
START_OVER = "Send a shorter message, or start a new dialog with /new."

MemoryRecall = Callable[[TurnStart], Awaitable[str | None]]
"""Recalls long-term memory for a turn: returns text for the runtime context, or None."""
MemoryRecallSync = Callable[[TurnStart], str | None]
"""The same, on a storage thread (``prefetch_turn_input``)."""
Publish = Callable[[str], Awaitable[object]]
"""Tells the chat a notice (a warning ``notification``)."""


class CompactingPhase(Protocol):
    """Where the builder shows that it compacts (``delivery.turn.TurnController``)."""

    def begin_compacting(self) -> bool: ...

    def end_compacting(self) -> bool: ...


class ContextPreparationError(Exception):
    """The turn's input could not be made to fit the model; nothing was sent.

    Attributes:
        message: what to tell the user (no payloads).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class CompressionUpdate:
    """A summary an automatic compaction wrote, to be committed conditionally (seed 000 §7.1).

    Attributes:
        summary: the new summary (it replaces and merges the previous one).
        covers_seq: it stands for the history rows with ``seq <= covers_seq``.
        expected_summary_seq: the dialog's ``summary_seq`` it was built on.
        kept_rows: the rows after ``covers_seq`` (history form), as the input used them.
        summarised_rows: how many rows it folded in.
    """

    summary: str
    covers_seq: int
    expected_summary_seq: int
    kept_rows: list[dict] = field(repr=False)
    summarised_rows: int = 0


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


@dataclass(frozen=True)
class _DialogContext:
    state_version: int
    auto_compact_failures: int
    plan: str


def load_dialog_context(dialog_id: str) -> dict:
    """``{state_version, auto_compact_failures, plan}`` of a dialog; ``plan`` is the active plan
    rendered as text (``tools.plan.render_plan``), ``""`` when there is none. Touches the DB: call
    through ``run_storage``."""
    state_version, auto_compact_failures, plan_content, plan_updated_at = sql.dialog_context(dialog_id) or (
        0, 0, None, None
    )
    plan = plan_from_row(plan_content, plan_updated_at)
    text = render_plan(plan).strip() if plan is not None else ""
    if len(text) > MAX_PLAN_CHARS:
        text = text[: MAX_PLAN_CHARS - 1] + "…"
    return {
        "state_version": int(state_version or 0),
        "auto_compact_failures": int(auto_compact_failures or 0),
        "plan": text,
    }


def prefetch_turn_input(start: TurnStart, recall: MemoryRecallSync | None) -> dict:
    """What :meth:`TurnInputBuilder.prepare` reads, read on the storage thread right after the
    turn start, in the same trip (``session_turns.begin_turn``): ``{"dialog":
    load_dialog_context(…), "memory": recall(start)}``. Raises what they raise; the caller then
    leaves it to the builder, which reads (and reports) it itself."""
    return {"dialog": load_dialog_context(start.dialog_id), "memory": recall(start) if recall is not None else None}


def runtime_context(start: TurnStart, *, now: datetime, plan: str = "", memory: str = "") -> str:
    """The per-request runtime context (seed 000 §7.1): time, channel, title, plan, memory.

    ``time=…; channel=…; dialog_title='…'``, then an ``Active plan:`` and a ``Recalled memory:``
    section when there are any. Never stored. Lone surrogates (a plan stored before its steps were
    scrubbed, a memory hook's text) become U+FFFD (``unicode_text.fix_surrogates``): one would fail
    the encoding of every later request of the dialog.
    """
    text = f"time={now.isoformat(timespec='seconds')}; channel={start.channel}; dialog_title={start.title!r}"
    if plan:
        text += f"\nActive plan:\n{plan}"
    if memory:
        text += f"\nRecalled memory:\n{memory}"
    return fix_surrogates(text)


def overflow_mid_turn_message(*, shortened: bool) -> str:
    """What a turn fails with when the provider reported a context overflow that could not be
    recovered: a later request (after tool calls) that overflowed also after it was fitted harder
    (``AgentLoop``; seed 000 §7.2: a second overflow fails clearly), one that could not be cut at
    all, or one after output was shown.

    Args:
        shortened: the refused request had been shortened to fit (``AgentResult.refused_shortened``);
            only then does the message say so — a request sent as it was claims no compaction.
    """
    reason = "the model refused this turn's input as over its context window"
    if shortened:
        reason += ", even after it was shortened to fit"
    return f"{TOO_LONG}: {reason}. {START_OVER}"


def overflow_again_message(prepared: PreparedInput) -> str:
    """What a turn whose recovered input overflowed again fails with (seed 000 §7.2)."""
    return (
        f"{TOO_LONG}: the model refused its input again after it was cut down to about "
        f"{prepared.estimate:,} tokens. {START_OVER}"
    )


def _changed(before: Sequence[Message], after: Sequence[Message]) -> int:
    return sum(1 for a, b in zip(before, after, strict=False) if a is not b)


class TurnInputBuilder:
    """Builds, compacts and (after an overflow) rebuilds a turn's input; see the module docstring.

    Args:
        provider: the model of the turn (it also writes automatic summaries).
        system_prompt: the system prompt (``PICOBOT["SYSTEM_PROMPT"]``).
        tools: the tool definitions the request offers (counted in the estimate).
        window_tokens: the model's context window, tokens.
        threshold: share of the window (0–1) a request may use before it is compacted.
        keep_messages: history rows a summary keeps verbatim at most.
        keep_tool_results: tool results the first microcompact pass keeps whole.
        compact_timeout: seconds one summary call may take.
        memory_recall: the memory hook (None: no memory).
        phase: shows the ``compacting`` phase (the turn's ``TurnController``), or None.
        clock: returns the current time (tests).
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
    ) -> TurnInputBuilder:
        """A builder configured from ``settings.PICOBOT`` (window, threshold, keep, timeout)."""
        config = settings.PICOBOT
        return cls(
            provider,
            system_prompt=config["SYSTEM_PROMPT"],
            tools=tools,
            window_tokens=int(config["LLM_CONTEXT_WINDOW"]),
            threshold=float(config["COMPACT_THRESHOLD"]),
            keep_messages=int(config["COMPACT_KEEP_MESSAGES"]),
            compact_timeout=float(config["COMPACT_TIMEOUT"]),
            memory_recall=memory_recall,
            phase=phase,
        )

    # -- public API ----------------------------------------------------------------------------

    async def prepare(self, start: TurnStart, *, window_tokens: int | None = None) -> PreparedInput:
        """The turn's input, compacted to fit ``window_tokens`` (default: the configured window).

        Raises:
            ContextPreparationError: even the smallest input (the current turn alone, old tool
                results shortened) is estimated over the window.
            django.db.DatabaseError: the dialog's state could not be read (after retries).
        """
        window = self.window_tokens if window_tokens is None else max(1, int(window_tokens))
        return await self._prepare(start, window, limit=window, recovering=False)

    async def recover_after_overflow(self, start: TurnStart, previous: PreparedInput) -> PreparedInput:
        """Rebuild after the provider reported a context overflow for ``previous`` (seed 000 §7.2).

        The same assembly as :meth:`prepare`, from the compacted state ``previous`` used (its
        compression, committed or not), with half of ``previous.estimate`` as the window: old
        tool results are shortened, older history summarised (when allowed) and the oldest turns
        left out, tool pairs kept together. Call it once per turn.

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
        window = max(1, previous.estimate // 2)
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
            log.info("dialog %s: automatic compaction discarded (the dialog changed meanwhile)", start.dialog_id)
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

    def fit(self, messages: list[Message], *, hard: bool = False) -> list[Message]:
        """A later request of the turn (after tool calls), fitted to the context window.

        The budget is the compaction share of the window the turn's input was prepared for
        (``prepared.window``; smaller after an overflow recovery), half of it with ``hard``
        (after the provider reported an overflow anyway). ``compaction.fit_request`` shortens
        older tool results, cuts the largest ones with a marker, then leaves old turns out — in
        the request only: ``messages`` and the stored history stay whole. Pure, no I/O.
        """
        window = self.prepared.window if self.prepared is not None and self.prepared.window else self.window_tokens
        budget = max(1, int(window * self.threshold))
        if hard:
            budget = max(1, budget // 2)
        before = self.estimate(messages)
        fitted = fit_request(messages, budget - self._fixed, keep_recent=self.keep_tool_results)
        if len(fitted) != len(messages) or _changed(messages, fitted):
            log.info(
                "a later request fitted%s: about %d → %d estimated tokens (budget %d)",
                " hard" if hard else "", before, self.estimate(fitted), budget,
            )
        return fitted

    async def _context(self, start: TurnStart, *, reread: bool) -> tuple[_DialogContext, str]:
        """The dialog's state and the runtime context: as prefetched with the turn start, or read
        now (``reread``: after an overflow, or nothing was prefetched)."""
        prefetched = None if reread else start.prefetched
        if prefetched is not None:
            state, memory = prefetched["dialog"], self._clip_memory(prefetched["memory"] if self.memory_recall else None)
        else:
            state, memory = await asyncio.gather(run_storage(load_dialog_context, start.dialog_id), self._recall(start))
        return (
            _DialogContext(state["state_version"], state["auto_compact_failures"], state["plan"]),
            runtime_context(start, now=self.clock(), plan=state["plan"], memory=memory),
        )

    async def _recall(self, start: TurnStart) -> str:
        if self.memory_recall is None:
            return ""
        try:
            text = await self.memory_recall(start)
        except Exception:
            log.exception("dialog %s: memory recall failed; the turn goes on without it", start.dialog_id)
            return ""
        return self._clip_memory(text)

    @staticmethod
    def _clip_memory(text: str | None) -> str:
        text = (text or "").strip()
        return text if len(text) <= MAX_MEMORY_CHARS else text[: MAX_MEMORY_CHARS - 1] + "…"

    async def _prepare(self, start: TurnStart, window: int, *, limit: int, recovering: bool) -> PreparedInput:
        dialog, context = await self._context(start, reread=recovering)
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
                compression = await self._summarise(start, summary, rows, target)
            except CompactionError as exc:
                failures = await self._count_failure(start, failures)
                notices.append(self._failure_notice(exc, failures))
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

    async def _summarise(
        self, start: TurnStart, summary: str, rows: list[dict], target: int
    ) -> CompressionUpdate | None:
        """One automatic summary, under the ``compacting`` phase; None when nothing can fold."""
        keep = rows_to_keep(rows, self.keep_messages, target, fixed=self._fixed)
        if choose_boundary(rows, keep) is None:
            return None  # nothing can be folded without splitting the current turn
        if self.phase is not None:
            self.phase.begin_compacting()
        try:
            result = await summarise_rows(
                start.dialog_id,
                self.provider,
                summary,
                rows,
                keep=keep,
                budget=target,
                timeout=self.compact_timeout,
            )
        finally:
            if self.phase is not None:
                self.phase.end_compacting()
        if result is None:
            return None
        return CompressionUpdate(
            summary=result.summary,
            covers_seq=result.covers_seq,
            expected_summary_seq=start.summary_seq,
            kept_rows=result.kept_rows,
            summarised_rows=result.summarised_rows,
        )

    @staticmethod
    async def _count_failure(start: TurnStart, failures: int) -> int:
        """Count a failed automatic compaction on the dialog; storage trouble only goes to the log."""
        try:
            return await run_storage(record_auto_compact_failure, start.dialog_id)
        except DatabaseError:
            log.exception("dialog %s: could not count a failed automatic compaction", start.dialog_id)
            return failures + 1

    @staticmethod
    def _failure_notice(exc: CompactionError, failures: int) -> str:
        text = (
            f"Automatic compaction failed: {exc.message} This turn goes on with older tool results shortened "
            "and, if needed, the oldest messages left out."
        )
        if failures >= MAX_CONSECUTIVE_FAILURES:
            text += (
                f" After {failures} failures in a row automatic compaction is off for this dialog; /compact "
                "(or a new dialog) turns it back on."
            )
        return text


def overflowed_before_output(result: AgentResult) -> bool:
    """Whether the provider reported a context overflow before the turn showed anything.

    Nothing shown means no complete message (no answer, no tool call) and no partial text or
    reasoning (seed 000 §7.2: only then can the turn start over unnoticed). Shown reasoning counts
    although it is no ``partial`` (it is not kept): the user saw it, and a retry would show a
    second attempt's reasoning after it.
    """
    return (
        isinstance(result.error, ContextOverflowError)
        and not result.messages
        and result.partial is None
        and not result.shown_before_error
    )


async def run_with_overflow_recovery(
    builder: TurnInputBuilder,
    start: TurnStart,
    run: Callable[[list[Message]], Awaitable[AgentResult]],
    *,
    publish: Publish | None = None,
) -> AgentResult:
    """Prepare the turn's input, run the turn, and recover from one context overflow (seed 000 §7.2).

    The input is built (and compacted, the compaction committed) by ``builder``; ``run`` is the
    agent loop (``AgentLoop.run``). When the provider reports a context overflow before anything
    was shown, the input is rebuilt once through the same builder with a smaller window
    (:meth:`TurnInputBuilder.recover_after_overflow`) and the turn runs once more. Notices (a
    failed compaction, left-out messages) go to ``publish``. The last prepared input is
    ``builder.prepared`` (its ``base_state_version`` for stale-state checks).

    Returns:
        The agent result (with ``error`` set for other provider failures, as ``run`` returns it).

    Raises:
        ContextPreparationError: the input cannot be made to fit, or the rebuilt one overflowed
            too; nothing of the turn was shown.
        TurnFailedError: storage failed while the input was built (kind ``context_preparation``).
    """
    prepared = await _preparing(start, builder.prepare(start), builder)
    await _tell(publish, prepared)
    result = await run(prepared.messages)
    if not overflowed_before_output(result):
        return result
    log.warning(
        "dialog %s: context overflow at about %d estimated tokens; rebuilding the input once",
        start.dialog_id,
        prepared.estimate,
    )
    prepared = await _preparing(start, builder.recover_after_overflow(start, prepared), builder)
    await _tell(publish, prepared)
    result = await run(prepared.messages)
    if overflowed_before_output(result):
        log.warning("dialog %s: context overflow again at about %d tokens", start.dialog_id, prepared.estimate)
        raise ContextPreparationError(overflow_again_message(prepared))
    return result


async def _preparing(
    start: TurnStart, building: Awaitable[PreparedInput], builder: TurnInputBuilder
) -> PreparedInput:
    """Await a build of the input and commit its compression; a storage error (after
    ``run_storage``'s retries) becomes a typed ``context_preparation`` failure."""
    try:
        return await builder.commit_compression(start, await building)
    except DatabaseError as exc:
        raise TurnFailedError(
            TurnFailure.from_exception(TurnFailureKind.CONTEXT_PREPARATION, exc, traceback=False)
        ) from exc


async def _tell(publish: Publish | None, prepared: PreparedInput) -> None:
    if publish is None:
        return
    for notice in prepared.notices:
        try:
            await publish(notice)
        except Exception:
            log.exception("could not publish a context notice")
