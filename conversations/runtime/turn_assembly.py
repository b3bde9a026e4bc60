"""What one turn runs: its model preset, input builder, agent loop and the work to start
(``DialogExecutor._run_and_commit``; DESIGN §5, issue 17).

:func:`assemble_turn` puts the parts together for a started turn; the executor owns the task,
the deadline and the commit. :func:`turn_scope` is the call scope every provider call and log
line of the turn carries (``providers.metering``, ``picobot_site.log_format``).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings

from conversations.agent.background_tasks import SPAWN_TASK
from conversations.agent.loop import AgentLoop, AgentResult
from conversations.agent.tool_registry import ToolContext
from conversations.context.history import with_client_instructions
from conversations.context.overflow import run_with_overflow_recovery
from conversations.context.turn_input import TurnInputBuilder
from conversations.runtime.provider import preset_for, turn_provider
from conversations.runtime.turn_alerts import context_notice, fallback_notice
from conversations.runtime.turn_context import TurnContext
from conversations.runtime.turn_sinks import API_CHANNEL
from conversations.tools.memory import recall_memories
from conversations.usage.budget import run_within_budget
from providers.metering import CallScope

if TYPE_CHECKING:
    from conversations.runtime.executor import RunningTurn
    from conversations.storage.shapes import TurnStart


def turn_scope(start: TurnStart) -> CallScope:
    """The scope of a turn's provider calls and log lines."""
    return CallScope("turn", start.dialog_id, start.turn_id, start.owner_id, start.channel)


@dataclass
class AssembledTurn:
    """A turn ready to run: ``work()`` runs it (budget check, input, the loop, one overflow
    recovery) and returns the loop's result; ``loop`` stays readable after a cancel."""

    loop: AgentLoop
    work: Callable[[], Awaitable[AgentResult]]


def assemble_turn(
    context: TurnContext,
    start: TurnStart,
    running: RunningTurn,
    *,
    is_current: Callable[[], object],
) -> AssembledTurn:
    """The parts of ``start``'s turn on its dialog's model preset (``/model``; a removed preset
    is the default). ``is_current`` is the loop's stale-state check (seed 003 §8.3)."""
    config = settings.PICOBOT
    preset = preset_for(start.model)
    running.preset = preset.name
    # One input path (seed 000 §7.1): compaction under the `compacting` phase, and one rebuild
    # after a context overflow (§7.2), all inside the task that /stop and the deadline cancel.
    # One view of the tools for the whole turn: tools that appear or disappear meanwhile (an MCP
    # server's list changed) are the next turn's.
    # A one-request /v1 dialog is deleted once its turn ended, and a delete stops the dialog's
    # background tasks: a task started there could never report back, so it gets no spawn_task.
    tools = context.tools.bind(
        ToolContext(start.dialog_id, start.channel, start.chat_id, turn_id=str(start.turn_id)),
        hide=(SPAWN_TASK,) if start.channel == API_CHANNEL else (),
    )
    builder = TurnInputBuilder.from_settings(
        context.provider_for(preset.name),
        tools=tools.definitions(),
        memory_recall=recall_memories,
        phase=running.controller,
        window_tokens=preset.context_window,
        preset=preset,  # output budget; a window its provider states is learned for it (issue 17)
    )
    builder.system_prompt = with_client_instructions(builder.system_prompt, start.instructions)
    # The dialog's preset, or its fallback chain (providers.fallback; issue 17).
    answering = turn_provider(preset.name, context.provider_for, fallback_notice(start, running.answered_by))
    loop = AgentLoop(
        answering,
        tools,
        running.controller.apply,
        max_iterations=config.max_iterations,
        tool_timeout=config.tool_timeout,
        is_current=is_current,  # before each provider call and after each tool batch (seed 003 §8.3)
        fitter=builder,  # later requests fitted, every request sized, overflows resized (§7.2, issue 17)
        max_calls_per_response=config.max_tool_calls_per_response,
        max_output_chars=config.max_turn_output_chars,
    )
    work = functools.partial(  # a budget used up since the message queued: no call (issue 17)
        run_within_budget,
        start.owner_id,
        run_with_overflow_recovery,
        builder,
        start,
        loop.run,
        publish=context_notice(start),
    )
    return AssembledTurn(loop, work)
