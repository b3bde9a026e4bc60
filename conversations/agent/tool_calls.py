"""One model response's tool calls: made fit to keep, run concurrently, wound down on a stop (seed 003 §8.1, §14.1).

Pure (no Django, no channel layer). :func:`unique_ids` and :func:`sendable_names` make the calls
of a response fit to store and send back; :func:`run_tool_calls` runs them at the same time
through the registry and records each result as it finishes; on a stop or a fatal tool error the
calls still running are cancelled, and those that outlive :data:`CANCEL_GRACE_SECONDS` are
abandoned. :func:`display_arguments` is what a tool block shows. Rules: ``agent/README.md``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from conversations.agent.log_safety import log_safe
from conversations.agent.tool_registry import DEFAULT_MAX_ARGUMENT_BYTES, ToolFatalError, ToolRegistry
from delivery.events import ToolFinished, TurnEvent
from picobot_site.metrics import instruments
from providers.blocks import UNNAMED_TOOL
from providers.messages import Message
from providers.types import ToolCall

log = logging.getLogger(__name__)

CANCEL_GRACE_SECONDS = 0.5
"""How long a cancelled turn waits for its running tool calls to end; calls still running then
(a tool that swallows its cancellation) are abandoned, so ``/stop`` ends the turn within a second."""

# Tool calls abandoned after the grace: kept referenced until they end (a task only weakly held
# could be garbage-collected mid-run), their results dropped.
_abandoned: set[asyncio.Task] = set()


def unique_ids(calls: list[ToolCall], seen: set[str]) -> list[ToolCall]:
    """The calls with an id each that is unique within the turn (``seen`` collects the turn's ids).

    Some OpenAI-compatible servers send empty ids, or reuse ``call_0`` in every response; a
    result must pair with exactly one call, so such ids are replaced (consistently in the
    assistant message and the tool result, which is all the provider sees).
    """
    out = []
    for call in calls:
        if not call.id or call.id in seen:
            call = ToolCall(
                id=f"call_{uuid.uuid4().hex[:24]}", name=call.name, arguments_json=call.arguments_json
            )
        seen.add(call.id)
        out.append(call)
    return out


def sendable_names(calls: list[ToolCall]) -> tuple[list[ToolCall], dict[str, ToolCall]]:
    """The calls with a name each, and the renamed ones as the model made them.

    Returns:
        ``(calls, as_called)``: ``calls`` with every empty or blank name replaced by
        ``unnamed_tool`` (the assistant message, the tool block and the result carry it);
        ``as_called`` maps such a call's id to the call as made, which is what the registry
        runs, so its error result says "a tool call needs a name".
    """
    out: list[ToolCall] = []
    as_called: dict[str, ToolCall] = {}
    for call in calls:
        if not call.name.strip():
            log.warning("a tool call without a name (%s) is kept as %s", log_safe(call.id, 200), UNNAMED_TOOL)
            as_called[call.id] = call
            call = ToolCall(id=call.id, name=UNNAMED_TOOL, arguments_json=call.arguments_json)
        out.append(call)
    return out, as_called


async def run_tool_calls(
    calls: list[ToolCall],
    iteration: int,
    *,
    tools: ToolRegistry,
    timeout: float,
    emit: Callable[[TurnEvent], object],
    closed: Callable[[], bool],
    finished: dict[str, Message],
    as_called: dict[str, ToolCall] | None = None,
    note: tuple[str, str] | None = None,
) -> None:
    """Run one response's calls concurrently, each through ``tools.run`` with ``timeout`` seconds.

    Each result goes into ``finished`` (by call id) and is shown (``ToolFinished`` through
    ``emit``) at the same moment, with no await in between: shown means kept. ``finished`` holds
    the results that came even when this raises. A result that comes once ``closed()`` (the turn
    is being cancelled) or after the batch ended (an abandoned call) is neither shown nor kept.

    Args:
        as_called: a renamed call's id → the call as the model made it (what runs).
        note: ``(call_id, text)``: ``text`` is appended to that call's result (calls dropped
            over the per-response cap).

    Raises:
        ToolFatalError: a call said the turn cannot go on (the others are cancelled).
        asyncio.CancelledError: the turn is being cancelled; calls that outlive
            :data:`CANCEL_GRACE_SECONDS` are abandoned (they run on detached, a warning names them).
    """
    batch_open = True
    as_called = as_called or {}
    note_on, note_text = note if note is not None else (None, "")

    async def one(call: ToolCall) -> None:
        made = as_called.get(call.id, call)
        try:
            outcome = await tools.run(made, timeout)
        except ToolFatalError:
            _count_call(tools, made.name, error=True)
            raise
        _count_call(tools, made.name, error=outcome.is_error)
        if closed() or not batch_open:
            return  # a late result after /stop or an abandoned call: neither shown nor kept (§14.1)
        content = outcome.content + note_text if call.id == note_on else outcome.content
        # Recorded and shown together, with no await in between: shown means kept.
        finished[call.id] = Message.tool_result(
            call.id, content, is_error=outcome.is_error, tool_name=call.name
        )
        emit(
            ToolFinished(
                iteration=iteration, call_id=call.id, success=not outcome.is_error, preview=outcome.preview
            )
        )

    tasks = {asyncio.create_task(one(call), name=f"tool {call.name}"): call for call in calls}
    try:
        await _all_done(list(tasks))
    except BaseException:
        # A stop, a deadline, a ToolFatalError or a crash: the other calls are cancelled.
        await _wind_down(tasks)
        raise
    finally:
        batch_open = False


def _count_call(tools: ToolRegistry, name: str, *, error: bool) -> None:
    """Count a call that ran in the metrics, under ``unknown`` when the registry has no such tool
    (the model's names are not trusted as label values)."""
    instruments.record_tool_call(name if name in tools else instruments.UNKNOWN_TOOL, error=error)


async def _all_done(tasks: list[asyncio.Task]) -> None:
    """Wait for every task; the first failure (a ``ToolFatalError`` before others) is raised."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
        errors = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
        if errors:
            raise next((e for e in errors if isinstance(e, ToolFatalError)), errors[0])  # type: ignore[misc]


async def _wind_down(tasks: dict[asyncio.Task, ToolCall]) -> None:
    """Cancel the tasks still running and wait at most :data:`CANCEL_GRACE_SECONDS` for them;
    the ones that outlive it are abandoned (logged, kept referenced until they end)."""
    running = [task for task in tasks if not task.done()]
    for task in running:
        task.cancel()
    still: set[asyncio.Task] = set(running)
    try:
        if running:
            _, still = await asyncio.wait(running, timeout=CANCEL_GRACE_SECONDS)
    finally:
        for task in tasks:
            if task.done():
                _retrieve(task)
            elif task in still:
                call = tasks[task]
                log.warning(
                    "tool %s (call %s) did not stop within %g s of its cancellation; abandoned "
                    "(it runs on detached, its result is dropped)",
                    log_safe(call.name, 200),
                    log_safe(call.id, 200),
                    CANCEL_GRACE_SECONDS,
                )
                _abandoned.add(task)
                task.add_done_callback(_forget)
            else:  # cancelled again while waiting: still ours to forget cleanly
                task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Task) -> None:
    """Mark a finished task's exception as seen (it was already reported, or is moot)."""
    if not task.cancelled():
        task.exception()


def _forget(task: asyncio.Task) -> None:
    _abandoned.discard(task)
    _retrieve(task)


def display_arguments(call: ToolCall, max_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES) -> dict:
    """The arguments a tool block shows: the parsed JSON object, or ``{}`` when the model's text
    was not one (PROTOCOL §1: the raw text stays on the server; the result says what was wrong).

    A text over ``max_bytes`` (UTF-8) is not parsed: it shows as ``{"_truncated": "<N> bytes"}``,
    like any argument object too large for a snapshot (``delivery.turn.shown_arguments``)."""
    if call.argument_bytes > max_bytes:
        return {"_truncated": f"{call.argument_bytes} bytes"}
    try:
        arguments = call.arguments()
    except ValueError:
        return {}
    return arguments if isinstance(arguments, dict) else {}
