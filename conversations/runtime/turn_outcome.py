"""How a turn ended, and what its commit keeps and its terminal snapshot shows.

``await_turn`` waits for the agent loop's task under the turn's deadline and types whatever ended
it (seed 000 §13): a ``/stop``, the deadline, a failure — never the executor's own end.
``turn_ending`` then decides, without I/O, the rows, the inbox outcome and the error the commit
carries (seed 003 §14). Both run on the executor's task: ``await_turn`` tells a cancellation of
the loop's task from one of the executor itself by ``current_task().cancelling()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from conversations import storage
from conversations.agent.failures import (
    TurnFailedError,
    TurnFailure,
    TurnFailureKind,
    TurnFailurePresenter,
)
from conversations.agent.log_safety import describe_exception
from conversations.agent.loop import AgentResult
from conversations.agent.tool_registry import ToolFatalError
from conversations.context.overflow import overflow_mid_turn_message
from conversations.context.turn_input import ContextPreparationError
from conversations.models import InboxMessage, Message
from conversations.runtime.turn_rows import complete_tool_chains, turn_rows
from providers.errors import ContextOverflowError
from providers.types import hit_output_limit


class TurnCrashedError(Exception):
    """The turn's task raised a ``BaseException`` that is neither a cancellation nor a process exit
    (``GeneratorExit``, a ``BaseExceptionGroup`` out of a TaskGroup, a library's own subclass);
    the original is its ``__cause__``."""


async def contained(turn: Callable[[], Awaitable[AgentResult]]) -> AgentResult:
    """``await turn()``, with any stray ``BaseException`` turned into :class:`TurnCrashedError`.

    ``turn`` is called only once this runs: a task cancelled before its first step (a ``/stop``
    while the turn was set up) then leaves no coroutine that was never awaited.

    The executor awaits the turn's task; a task that ended with ``GeneratorExit`` would have it
    *thrown* into the executor's coroutine, which can then never await again ("coroutine ignored
    GeneratorExit") and the executor dies — the turn later reads "interrupted by a server
    restart". A cancellation, ``KeyboardInterrupt`` and ``SystemExit`` go on unchanged.
    """
    try:
        return await turn()
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
        raise
    except Exception:
        raise
    except BaseException as exc:
        raise TurnCrashedError(f"the turn raised {type(exc).__name__}: {exc}") from exc


@dataclass
class TurnEnd:
    """How the agent loop's task ended.

    Attributes:
        result: The loop's result; None when it did not return one (cancelled, failed, timed
            out): the executor then keeps what the loop finished, plus the partial answer.
        cancelled: A ``/stop`` (or a shutdown, a lost lease) cancelled the loop's task.
        failure: The typed failure (seed 000 §13); its cause goes to the log only.
    """

    result: AgentResult | None = None
    cancelled: bool = False
    failure: TurnFailure | None = None


async def await_turn(task: asyncio.Future[AgentResult], turn_timeout: float) -> TurnEnd:
    """Wait for the turn's task for at most ``turn_timeout`` seconds and type how it ended.

    Any ``Exception`` and any other ``BaseException`` (``GeneratorExit``, a
    ``BaseExceptionGroup``: :func:`contained`) becomes a typed failure. Raises
    ``CancelledError`` when the executor itself is cancelled; ``KeyboardInterrupt`` and
    ``SystemExit`` go on. On the deadline the task is cancelled (``asyncio.timeout``).
    """
    end = TurnEnd()
    deadline = asyncio.timeout(turn_timeout)
    try:
        async with deadline:
            end.result = await task
    except asyncio.CancelledError:
        if not task.cancelled() or asyncio.current_task().cancelling():  # type: ignore[union-attr]
            raise
        end.cancelled = True  # /stop cancelled the loop task, not this executor
    # Typed failures (seed 000 §13): the executor presents them; only the log gets their cause.
    except TimeoutError as exc:
        if deadline.expired():  # the turn's own deadline, not a TimeoutError from inside it
            end.failure = TurnFailure.of(
                TurnFailureKind.TIMEOUT,
                user_message=f"The turn took longer than {turn_timeout:g} s and was stopped",
                detail=f"TURN_TIMEOUT of {turn_timeout:g} s passed",
            )
        else:
            end.failure = TurnFailure.from_exception(TurnFailureKind.INTERNAL, exc)
    except ToolFatalError as exc:  # the tool's own words may hold anything: the log only
        end.failure = TurnFailure.from_exception(TurnFailureKind.TOOL, exc, traceback=False)
    except ContextPreparationError as exc:
        end.failure = TurnFailure.of(
            TurnFailureKind.CONTEXT_PREPARATION, user_message=exc.message, detail=describe_exception(exc)
        )
        end.result = AgentResult()  # nothing was shown: no input fitted, or it overflowed twice
    except TurnFailedError as exc:  # a step of the turn that typed its own failure
        end.failure = exc.failure
    except Exception as exc:
        end.failure = TurnFailure.from_exception(TurnFailureKind.INTERNAL, exc)
    except (KeyboardInterrupt, SystemExit):
        raise  # the process is going down (the event loop re-raises them anyway)
    except BaseException as exc:  # not expected (``contained``), but never the executor's end
        if asyncio.current_task().cancelling():  # type: ignore[union-attr]
            raise
        end.failure = TurnFailure.from_exception(TurnFailureKind.INTERNAL, exc)
    return end


@dataclass(frozen=True)
class TurnEnding:
    """What a finished turn commits and how its terminal snapshot ends.

    Attributes:
        rows: The message rows for ``storage.commit_turn``.
        usage: The turn's token usage (``Usage.to_dict()``).
        outcome: The inbox row's outcome.
        shown_error: The error the terminal snapshot shows, kept with the commit
            (``conversations.chat.reconcile`` rebuilds the snapshot from it); "" when completed.
        error: The failure as the user reads it; "" without a failure.
        failure: The typed failure, the provider's error included; None when there was none.
        truncated: The turn completed and its last model response stopped at the output limit
            (``providers.types.hit_output_limit``): its answer is cut off (PROTOCOL §1).
    """

    rows: list[dict]
    usage: dict
    outcome: InboxMessage.Outcome
    shown_error: str
    error: str
    failure: TurnFailure | None
    truncated: bool = False


def turn_ending(
    start: storage.TurnStart,
    result: AgentResult,
    *,
    cancelled: bool,
    failure: TurnFailure | None,
    cancel_reason: str,
    presenter: TurnFailurePresenter,
) -> TurnEnding:
    """The ending of a turn that is still its owner's (seed 003 §14).

    Cancel (§14.1; agent/README.md "Cancel"): what was shown is kept — the partial answer, or the
    reasoning alone (``AgentLoop.partial_message(reasoning_alone=True)``) — and the turn's last
    assistant row is ``cancelled`` (the partial, or the response whose tool calls were stopped);
    tool calls without a result get an error result. Failure (§14.2): the partial answer text
    is kept as ``interrupted``. A provider error the loop returned is a failure too; a context
    overflow it could not recover from is worded as such (seed 000 §7.2). Every failure is worded
    by ``presenter`` (seed 000 §13). A completed turn whose last response stopped at the output
    limit is ``truncated``; its last assistant row is kept even with reasoning alone (the loop
    keeps every complete response), so the cut is visible after a reload.
    """
    messages = complete_tool_chains(result.messages)
    status = Message.CompletionStatus.COMPLETED
    if isinstance(result.error, ContextOverflowError):  # not recovered: too long even fitted (§7.2)
        failure = replace(
            TurnFailure.provider(result.error),
            user_message=overflow_mid_turn_message(shortened=result.refused_shortened),
        )
    elif result.error is not None:
        failure = TurnFailure.provider(result.error)
    if result.partial is not None:
        # Shown text of an unfinished response is kept, marked (seed 003 §14.1, §14.2).
        messages.append(result.partial)
        status = Message.CompletionStatus.INTERRUPTED
    if cancelled:
        status = Message.CompletionStatus.CANCELLED
    error = presenter.present(failure) if failure is not None else ""
    if cancelled:
        outcome, shown_error = InboxMessage.Outcome.CANCELLED, cancel_reason
    elif failure is not None:
        outcome, shown_error = InboxMessage.Outcome.FAILED, error
    else:
        outcome, shown_error = InboxMessage.Outcome.COMPLETED, ""
    truncated = outcome == InboxMessage.Outcome.COMPLETED and hit_output_limit(result.finish_reason)
    return TurnEnding(
        rows=turn_rows(messages, start.turn_id, start.reply_message_id, status, truncated=truncated),
        usage=result.usage.to_dict(),
        outcome=outcome,
        shown_error=shown_error,
        error=error,
        failure=failure,
        truncated=truncated,
    )
