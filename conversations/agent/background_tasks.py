"""Background tasks' rules: what ``spawn_task`` accepts, the sub-agent's prompt, the notification.

Seed 000 §9: a background sub-agent's completion is a ``TaskNotification`` — a domain event across
turns, not the parent turn's tool progress. It enters the parent dialog's inbox as automated input
(``agent.automated_input``, kind ``task_notification``) with the text :func:`notification_text`
builds, so the model reads it as a background task's result and not as the user's words.

Pure module: no Django. The runner is ``runtime.background_tasks``; the tool ``tools.tasks``.
"""

from __future__ import annotations

from dataclasses import dataclass

from conversations.agent.tool_registry import ToolError

SPAWN_TASK = "spawn_task"
"""The tool's name; a task may never call it (no recursion)."""

PROMPT_MAX_CHARS = 8000
"""Characters of a task's prompt, at most."""

TASK_ID_CHARS = 10
"""Length of a task id (lower-case hex)."""

EXCERPT_CHARS = 60
"""Characters of a prompt that ``/tasks`` and labels show."""

SUB_AGENT_PROMPT = (
    "You are a background sub-agent of PicoBot. The main assistant gave you one task; work on it on "
    "your own with the tools you have. Nobody reads along and nobody can answer questions: do not ask "
    "any. When you are done, reply with a concise, self-contained report of what you found or did; "
    "that reply is all the main assistant receives."
)


@dataclass(frozen=True)
class TaskLimits:
    """A task's bounds: wall-clock ``max_seconds``, model requests ``max_iterations``, and
    ``max_tokens`` (input + output summed over its requests)."""

    max_seconds: float
    max_iterations: int
    max_tokens: int

    def as_dict(self) -> dict:
        return {
            "max_seconds": self.max_seconds,
            "max_iterations": self.max_iterations,
            "max_tokens": self.max_tokens,
        }


@dataclass(frozen=True)
class TaskRequest:
    """A checked ``spawn_task`` call: the prompt, the tool names the task may call, its limits."""

    prompt: str
    tools: tuple[str, ...]
    limits: TaskLimits


def spawn_parameters(caps: TaskLimits) -> dict:
    """The JSON Schema of ``spawn_task``'s arguments (limits bounded by ``caps``)."""
    return {
        "type": "object",
        "properties": {
            "prompt": {
                "type": "string",
                "minLength": 1,
                "maxLength": PROMPT_MAX_CHARS,
                "description": "the task, complete and self-contained: the sub-agent sees nothing else",
            },
            "tools": {
                "type": "array",
                "items": {"type": "string", "maxLength": 200},
                "maxItems": 64,
                "description": "names of the tools it may use (default: all of yours except spawn_task)",
            },
            "max_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": caps.max_seconds},
            "max_iterations": {"type": "integer", "minimum": 1, "maximum": caps.max_iterations},
            "max_tokens": {"type": "integer", "minimum": 1, "maximum": caps.max_tokens},
        },
        "required": ["prompt"],
        "additionalProperties": False,
    }


def task_request(arguments: dict, available: list[str], caps: TaskLimits) -> TaskRequest:
    """The checked request of a ``spawn_task`` call (arguments already match ``spawn_parameters``).

    ``available`` are the registry's tool names. Without ``tools`` the task gets all of them except
    ``spawn_task``; missing limits are the caps.

    Raises:
        ToolError: a blank prompt, ``spawn_task`` among the tools (no recursion), a tool name the
            registry does not hold, a limit above its cap.
    """
    prompt = str(arguments.get("prompt") or "").strip()
    if not prompt:
        raise ToolError("the prompt is empty; give the task's full instructions")
    offered = [name for name in available if name != SPAWN_TASK]
    asked = arguments.get("tools")
    if asked is None:
        tools = tuple(offered)
    else:
        names = list(dict.fromkeys(str(name) for name in asked))
        if SPAWN_TASK in names:
            raise ToolError(
                "a background task cannot start background tasks: leave spawn_task out of its tools"
            )
        unknown = [name for name in names if name not in offered]
        if unknown:
            raise ToolError(
                f"unknown tools {', '.join(map(repr, unknown))}; available: {', '.join(offered) or 'none'}"
            )
        tools = tuple(names)
    limits = TaskLimits(
        max_seconds=float(arguments.get("max_seconds") or caps.max_seconds),
        max_iterations=int(arguments.get("max_iterations") or caps.max_iterations),
        max_tokens=int(arguments.get("max_tokens") or caps.max_tokens),
    )
    for name, value, cap in (
        ("max_seconds", limits.max_seconds, caps.max_seconds),
        ("max_iterations", limits.max_iterations, caps.max_iterations),
        ("max_tokens", limits.max_tokens, caps.max_tokens),
    ):
        if value > cap:
            raise ToolError(f"{name} is at most {cap:g}")
    return TaskRequest(prompt=prompt, tools=tools, limits=limits)


def excerpt(prompt: str, limit: int = EXCERPT_CHARS) -> str:
    """The prompt on one line, cut to ``limit`` characters with "…"."""
    text = " ".join(prompt.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cut_result(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters plus a marker saying how much was cut."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[… {len(text) - max_chars} more characters of the task's answer were cut]"


def started_text(task_id: str) -> str:
    """``spawn_task``'s result: the task runs on; its result arrives later as its own message."""
    return (
        f"Task {task_id} started in the background. Do not wait for it: its result arrives later as a "
        f"separate message, and you answer it then. The user can list tasks with /tasks and stop this "
        f"one with /stop task {task_id}."
    )


def notification_text(task_id: str, status: str, prompt: str, result: str, error: str) -> str:
    """The ``TaskNotification`` the parent dialog's model reads (an automated user message).

    ``status`` is ``completed`` or ``failed``; ``result`` the sub-agent's final answer (completed),
    ``error`` why it failed.
    """
    lines = [
        f"[Background task {task_id} {status}. This message comes from PicoBot, not from the user: it "
        f"is the result of a background task you started with spawn_task. Tell the user what it means "
        f"for them.]",
        f"Task: {excerpt(prompt, 500)}",
    ]
    if status == "completed":
        lines.append(f"Result:\n{result or '(the task gave no answer text)'}")
    else:
        lines.append(f"Error: {error}")
        if result:
            lines.append(f"Its last answer before that:\n{result}")
    return "\n".join(lines)


def notification_label(task_id: str, status: str) -> str:
    """The short ``origin.label`` clients show with the notification."""
    return f"Background task {task_id} {status}"


def end_notice(task_id: str, status: str, prompt: str, refused: str = "") -> tuple[str, str] | None:
    """``(level, text)`` the chat is told about a task that ends without a turn, or None.

    ``cancelled`` (stopped by a user), ``interrupted`` (its process stopped or died; it is never
    run again), or a ``completed``/``failed`` end whose ``TaskNotification`` could not be queued
    (``refused``: why — the inbox is full, the budget is used up).
    """
    name = f"Background task {task_id} (“{excerpt(prompt)}”)"
    if refused:
        return (
            "warning",
            f"{name} {status}, but its result could not be queued ({refused.rstrip('. ')}); /tasks shows it.",
        )
    if status == "cancelled":
        return "info", f"{name} was stopped."
    if status == "interrupted":
        return (
            "warning",
            f"{name} was interrupted: its server process stopped. It will not be run again; ask for it "
            f"again if you still need it.",
        )
    return None
