"""The tool registry: the agent loop's contract with tools (DESIGN §6; rules: ``agent/README.md``).

Pure: no Django. :class:`ToolRegistry` holds the tools (:class:`Tool`) by name and runs each model call
through :meth:`ToolRegistry.run`, which never raises for a call it cannot run: an unknown
tool, invalid JSON or arguments (``tool_arguments``), a timeout or the tool's own
:class:`ToolError` becomes an ``is_error`` :class:`ToolOutcome` the model reads; only a
:class:`ToolFatalError` (and a real cancellation) ends the turn. Results are cut at
``max_result_chars`` with a marker. Tools with ``needs_context`` get the turn's
:class:`ToolContext`; the executor runs each turn on ``registry.bind(context)``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from conversations.agent.failures import new_ref
from conversations.agent.log_safety import describe_exception, log_safe
from conversations.agent.tool_arguments import validate_arguments
from providers.messages import ToolDefinition
from providers.types import ToolArgumentsError, ToolCall
from providers.unicode_text import fix_surrogates

log = logging.getLogger(__name__)

PREVIEW_CHARS = 200
DEFAULT_RESULT_MAX_CHARS = 16000
"""Default bound of one result's ``content`` in characters (``PICOBOT_TOOL_RESULT_MAX_CHARS``)."""
DEFAULT_MAX_CONCURRENT_CALLS = 16
"""Calls of one turn that run at the same time (``PICOBOT_MAX_TOOL_CALLS``)."""
DEFAULT_MAX_ARGUMENT_BYTES = 256 * 1024
"""Default bound of one call's argument text in UTF-8 bytes (``PICOBOT_MAX_TOOL_ARGUMENT_BYTES``)."""
VALIDATE_OFF_LOOP_BYTES = 32 * 1024
"""Argument texts larger than this are validated in a worker thread: ``jsonschema`` walks every
value in Python, and a large argument object would hold the event loop for a noticeable time."""


class ToolError(Exception):
    """A recoverable tool failure (a refusal, bad input): its message goes back to the model as an
    error result. The message must never carry secrets (DESIGN §9)."""


class ToolFatalError(Exception):
    """A failure that must end the turn (the registry re-raises it)."""


@dataclass(frozen=True)
class ToolContext:
    """Whose turn a tool call serves.

    Attributes:
        dialog_id: the dialog's unified id ``"{channel}:{chat_id}:{dialog_id}"`` (``Dialog.pk``).
        channel, chat_id: where the turn's answer goes.
        owner_id: the dialog owner's user id, or None when not known to the caller; tools that
            scope by owner then read it from the dialog row (an ownerless dialog is scoped to its
            chat).
        turn_id: the turn whose model made the call ("" when not known).
        tool_call_id: the call's id; :meth:`ToolRegistry.run` sets it for each call.
    """

    dialog_id: str
    channel: str = ""
    chat_id: str = ""
    owner_id: int | None = None
    turn_id: str = ""
    tool_call_id: str = ""


@dataclass(frozen=True)
class Tool:
    """A tool the model may call.

    ``handler(arguments) -> str`` (or ``handler(arguments, context)`` when ``needs_context``) is
    awaited with ``timeout`` seconds when that is shorter than the call's timeout (None: the
    call's timeout). ``parameters`` is a JSON Schema (Draft 2020-12) for the arguments object. A
    non-string return value is sent as JSON.
    """

    name: str
    description: str
    parameters: dict
    handler: Callable[..., Awaitable[Any]]
    timeout: float | None = None
    needs_context: bool = False

    def definition(self) -> ToolDefinition:
        """The provider-neutral definition sent to the model."""
        return ToolDefinition(name=self.name, description=self.description, parameters=self.parameters)


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call produced: ``content`` for the model, ``preview`` for the turn block."""

    content: str
    is_error: bool
    preview: str


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def truncate_result(content: str, max_chars: int) -> str:
    """``content`` cut to its first ``max_chars`` characters plus a marker saying how much was cut.

    The marker (about 90 characters) comes on top of ``max_chars``; ``max_chars <= 0`` means no
    limit.
    """
    if max_chars <= 0 or len(content) <= max_chars:
        return content
    cut = len(content) - max_chars
    return (
        f"{content[:max_chars]}\n[… truncated: {cut} of {len(content)} characters cut; "
        f"the tool result limit is {max_chars} characters]"
    )


def result_preview(text: str) -> str:
    """The short summary of a tool result that its turn block shows (``ToolOutcome.preview``)."""
    return _bounded(text, PREVIEW_CHARS)


class ToolRegistry:
    """The tools of an agent, by name.

    Args:
        tools: the initial tools (each schema is checked; see :meth:`register`).
        default_timeout: seconds per call when the call sets none (a tool's own shorter
            timeout wins).
        max_result_chars: bound of each result's ``content`` (``truncate_result``); ≤ 0 = none.
        max_concurrent_calls: calls running at the same time, at most (``PICOBOT_MAX_TOOL_CALLS``);
            each :meth:`bind` view (one turn) has its own slots. Values < 1 count as 1.
        max_argument_bytes: bound of one call's argument text in UTF-8 bytes
            (``PICOBOT_MAX_TOOL_ARGUMENT_BYTES``); a larger text gets an error result without
            being parsed. Values < 1 count as 1.
    """

    def __init__(
        self,
        tools: list[Tool] | None = None,
        *,
        default_timeout: float = 30.0,
        max_result_chars: int = DEFAULT_RESULT_MAX_CHARS,
        max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
        max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self.max_argument_bytes = max(1, int(max_argument_bytes))
        self._validators: dict[str, Draft202012Validator] = {}
        self.default_timeout = default_timeout
        self.max_result_chars = max_result_chars
        self.max_concurrent_calls = max(1, int(max_concurrent_calls))
        self._slots: asyncio.Semaphore | None = None
        self._slots_loop: asyncio.AbstractEventLoop | None = None
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add or replace a tool.

        Raises:
            ValueError: ``tool.parameters`` is not a valid Draft 2020-12 schema (a plugin with a
                broken schema fails at start-up, not at the model's first call).
        """
        validator = _validator(tool)
        # Copy-on-write: a bound view (a running turn) keeps the tables it was bound with.
        self._tools = {**self._tools, tool.name: tool}
        self._validators = {**self._validators, tool.name: validator}

    def replace_tools(self, prefix: str, tools: list[Tool]) -> dict[str, str]:
        """Swap every tool whose name starts with ``prefix`` for ``tools``, in one step.

        Tools appearing and disappearing at run time (an MCP server's list changed) go through
        here: a turn already running keeps the set it was bound with (:meth:`bind`), the next
        turn sees the new one. A tool of ``tools`` whose name does not start with ``prefix`` or
        whose schema is invalid is left out.

        Returns:
            The left-out tools: name → reason (empty when all were taken).
        """
        refused: dict[str, str] = {}
        kept: dict[str, tuple[Tool, Draft202012Validator]] = {}
        for tool in tools:
            if not tool.name.startswith(prefix):
                refused[tool.name] = f"its name does not start with {prefix!r}"
                continue
            try:
                kept[tool.name] = (tool, _validator(tool))
            except ValueError as exc:
                refused[tool.name] = str(exc)
        others = {name: tool for name, tool in self._tools.items() if not name.startswith(prefix)}
        self._tools = {**others, **{name: pair[0] for name, pair in kept.items()}}
        self._validators = {
            **{name: self._validators[name] for name in others},
            **{name: pair[1] for name, pair in kept.items()},
        }
        return refused

    def definitions(self) -> list[ToolDefinition]:
        """Definitions of every tool, in registration order."""
        return [t.definition() for t in self._tools.values()]

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def names(self) -> list[str]:
        """The tools' names, in registration order."""
        return list(self._tools)

    def subset(self, names: list[str] | tuple[str, ...]) -> ToolRegistry:
        """A new registry with only the tools ``names`` (in this registry's order) and this one's
        bounds; names it does not hold are skipped (a background task's tool subset)."""
        wanted = set(names)
        return ToolRegistry(
            [tool for name, tool in self._tools.items() if name in wanted],
            default_timeout=self.default_timeout,
            max_result_chars=self.max_result_chars,
            max_concurrent_calls=self.max_concurrent_calls,
            max_argument_bytes=self.max_argument_bytes,
        )

    def bind(self, context: ToolContext, *, hide: tuple[str, ...] = ()) -> BoundToolRegistry:
        """A view of this registry whose calls carry ``context`` (one per turn; cheap), without
        the tools named in ``hide`` (neither offered nor callable in that turn).

        The view keeps the tools as they are now: one registered, replaced or removed later
        (``replace_tools``) is seen by the next view, never half-way through a turn.
        """
        return BoundToolRegistry(self, context, hide)

    def _call_slots(self) -> asyncio.Semaphore:
        """The semaphore bounding this registry's running calls (one per event loop)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots = asyncio.Semaphore(self.max_concurrent_calls)
            self._slots_loop = loop
        return self._slots

    def call_timeout(self, tool: Tool, timeout: float | None = None) -> float:
        """Seconds a call of ``tool`` may run: the configured bound (``timeout``, else
        ``default_timeout``), or the tool's own timeout when that is shorter."""
        limit = timeout or self.default_timeout
        return min(tool.timeout, limit) if tool.timeout else limit

    async def run(
        self, call: ToolCall, timeout: float | None = None, *, context: ToolContext | None = None
    ) -> ToolOutcome:
        """Run one call; every recoverable failure becomes an error outcome.

        Args:
            call: the model's call (``arguments_json`` is parsed here).
            timeout: the configured seconds for this call (else ``default_timeout``); a tool's
                own shorter timeout wins, a longer one does not. The time counts from when the
                call gets a slot (``max_concurrent_calls``).
            context: the turn's context, passed to tools with ``needs_context``; such a tool
                called without one gets an error result.

        A tool that raises anything else — any ``Exception``, ``SystemExit``, ``KeyboardInterrupt``,
        a ``GeneratorExit`` of its own (not this coroutine being closed), or a ``CancelledError``
        of its own while this task is not being cancelled — gets an error result "<name> failed:
        <Type> (ref …)", logged once, redacted, on one line. A return value that is not strict
        JSON (a set, NaN, a cycle, nesting too deep to encode) gets an error result "<name>
        returned a value that is not JSON (…)"; an argument text over ``max_argument_bytes``
        gets "<name> arguments too large (N bytes; at most M)".

        Raises:
            ToolFatalError: the tool said the turn cannot go on.
            asyncio.CancelledError: the task running the call is being cancelled (``/stop``).
        """
        tool = self._tools.get(call.name)
        if tool is None and not call.name.strip():
            return self._error(f"a tool call needs a name; available: {', '.join(self._tools) or 'none'}")
        if tool is None:
            return self._error(f"unknown tool {call.name!r}; available: {', '.join(self._tools) or 'none'}")
        size = call.argument_bytes
        if size > self.max_argument_bytes:  # never parsed: a huge text would hold the event loop
            return self._error(
                f"{call.name} arguments too large ({size} bytes; at most {self.max_argument_bytes})"
            )
        try:
            arguments = call.arguments()
        except ToolArgumentsError as exc:
            return self._error(f"invalid arguments JSON for {call.name}: {exc}")
        validator = self._validators[tool.name]
        if size > VALIDATE_OFF_LOOP_BYTES:
            problem = await asyncio.to_thread(validate_arguments, validator, arguments)
        else:
            problem = validate_arguments(validator, arguments)
        if problem:
            return self._error(f"invalid arguments for {call.name}: {problem}")
        if tool.needs_context and context is None:
            return self._error(f"{call.name} is not available here (it needs a dialog)")
        # A copy of the top level: the parsed value is also the call's history record, which a
        # handler that pops or sets keys must not change.
        arguments = dict(arguments)
        limit = self.call_timeout(tool, timeout)
        task = asyncio.current_task()
        try:
            async with self._call_slots(), asyncio.timeout(limit):
                if tool.needs_context:
                    content = await tool.handler(arguments, replace(context, tool_call_id=call.id))
                else:
                    content = await tool.handler(arguments)
        except TimeoutError:
            return self._error(f"{call.name} timed out after {limit:g} s")
        except ToolFatalError:
            raise
        except ToolError as exc:
            return self._error(str(exc))
        except asyncio.CancelledError as exc:
            if being_cancelled():
                raise  # a /stop, a deadline, a sibling's fatal error: the cancellation goes on
            return self._crashed(call, exc)  # the tool's own (a future it cancelled itself)
        except GeneratorExit as exc:
            if asyncio.current_task() is not task:
                raise  # this coroutine is being closed from outside (never awaited again): it must not go on
            return self._crashed(call, exc)  # raised by the tool itself while it ran: a tool bug
        except BaseException as exc:  # noqa: BLE001 - a bug in one tool must not kill the turn
            # SystemExit (argparse in a plugin), KeyboardInterrupt raised by a library: a task
            # that raised one would stop the whole server's event loop.
            return self._crashed(call, exc)
        if not isinstance(content, str):
            try:
                # Strict JSON: NaN/Infinity are not JSON, nor are sets, cycles or 4301-digit ints.
                content = json.dumps(content, ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError, RecursionError) as exc:
                return self._not_json(call, exc)
        # A lone surrogate could not be shown, sent to the model or stored (unicode_text).
        content = truncate_result(fix_surrogates(content), self.max_result_chars)
        return ToolOutcome(content=content, is_error=False, preview=result_preview(content))

    def _not_json(self, call: ToolCall, exc: Exception) -> ToolOutcome:
        """The error outcome of a tool whose return value cannot be sent as JSON (a tool bug)."""
        reason = _bounded(f"{type(exc).__name__}: {exc}", 200)
        log.warning(
            "tool %s returned a value that is not JSON: %s", log_safe(call.name, 200), log_safe(reason)
        )
        return self._error(f"{call.name} returned a value that is not JSON ({reason})")

    def _crashed(self, call: ToolCall, exc: BaseException) -> ToolOutcome:
        """The error outcome of a tool that raised something unexpected, logged once."""
        # Never raw: the message may carry what an upstream sent (keys, forged log lines).
        ref = new_ref()
        log.error(
            "tool %s crashed (ref %s): %s",
            log_safe(call.name, 200),
            ref,
            log_safe(describe_exception(exc, with_traceback=True)),
        )
        return self._error(f"{call.name} failed: {type(exc).__name__} (ref {ref})")

    def _error(self, message: str) -> ToolOutcome:
        message = fix_surrogates(message)
        content = truncate_result(f"Error: {message}", self.max_result_chars)
        return ToolOutcome(content=content, is_error=True, preview=result_preview(message))


def _validator(tool: Tool) -> Draft202012Validator:
    """The validator of ``tool``'s arguments.

    Raises:
        ValueError: ``tool.parameters`` is not a valid Draft 2020-12 schema.
    """
    try:
        Draft202012Validator.check_schema(tool.parameters)
    except SchemaError as exc:
        raise ValueError(f"tool {tool.name!r}: invalid parameters schema: {exc.message}") from exc
    return Draft202012Validator(tool.parameters)


def being_cancelled() -> bool:
    """Whether the running task is being cancelled (``Task.cancelling()``): a ``CancelledError``
    raised then is a real cancellation; one raised otherwise is a tool's own failure."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class BoundToolRegistry(ToolRegistry):
    """A registry view whose :meth:`run` passes one turn's :class:`ToolContext` (see ``bind``).

    Drop-in for ``ToolRegistry`` where the agent loop takes one: same ``definitions``, ``run``,
    ``in``; a ``context=`` given to ``run`` explicitly still wins.
    """

    def __init__(self, registry: ToolRegistry, context: ToolContext, hide: tuple[str, ...] = ()) -> None:
        # The parent's tables as they are now: the parent replaces them (never mutates them) when
        # its tools change, so this view stays what it was for the whole turn.
        self._tools = registry._tools
        self._validators = registry._validators
        if any(name in self._tools for name in hide):
            self._tools = {name: tool for name, tool in self._tools.items() if name not in hide}
            self._validators = {name: v for name, v in self._validators.items() if name not in hide}
        self.default_timeout = registry.default_timeout
        self.max_result_chars = registry.max_result_chars
        self.max_concurrent_calls = registry.max_concurrent_calls
        self.max_argument_bytes = registry.max_argument_bytes
        self._slots = None  # its own: the bound is per turn, not shared by every turn
        self._slots_loop = None
        self.context = context

    async def run(
        self, call: ToolCall, timeout: float | None = None, *, context: ToolContext | None = None
    ) -> ToolOutcome:
        """:meth:`ToolRegistry.run` with the bound context."""
        return await super().run(call, timeout, context=context or self.context)
