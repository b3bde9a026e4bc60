"""``spawn_task``: start a background sub-agent (seed 000 §9; issue 18 "Background tasks").

The tool returns at once with the task's id; the sub-agent runs in the worker process
(``runtime.background_tasks.BackgroundTaskRunner``, the :class:`TaskStarter` here) with its own
prompt and tool subset, and its progress is never the calling turn's tool progress. Its result
comes back later as a ``TaskNotification`` turn of the same dialog. The argument rules are pure
(``agent.background_tasks.task_request``).
"""

from __future__ import annotations

from typing import Protocol

from conversations.agent.background_tasks import (
    SPAWN_TASK,
    TaskLimits,
    TaskRequest,
    spawn_parameters,
    started_text,
    task_request,
)
from conversations.agent.tool_registry import Tool, ToolContext


class TaskStarter(Protocol):
    """What ``spawn_task`` needs from the worker that runs tasks."""

    caps: TaskLimits
    """The largest limits a task may ask for (``PICOBOT_TASK_MAX_*``)."""

    def tool_names(self) -> list[str]:
        """The tools a task may be given (the worker's registry)."""
        ...

    async def start(self, request: TaskRequest, context: ToolContext) -> str:
        """Start the task for ``context``'s dialog; returns its id.

        Raises:
            ToolError: it cannot start (too many running, the dialog is gone, shutting down).
        """
        ...


def spawn_task_tool(starter: TaskStarter) -> Tool:
    """The ``spawn_task`` tool definition, starting tasks on ``starter``."""

    async def spawn_task(arguments: dict, context: ToolContext) -> str:
        request = task_request(arguments, starter.tool_names(), starter.caps)
        return started_text(await starter.start(request, context))

    return Tool(
        name=SPAWN_TASK,
        description=(
            "Start a background task: a sub-agent that works on its own on the prompt you give (with "
            "the tools you list) while this conversation goes on. It returns at once with the task's "
            "id; the task's result arrives later as a separate message. Use it for long, self-contained "
            "work the user need not wait for."
        ),
        parameters=spawn_parameters(starter.caps),
        handler=spawn_task,
        timeout=15.0,
        needs_context=True,
    )
