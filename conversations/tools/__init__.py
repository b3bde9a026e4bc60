"""Agent tools: the built-in tools and :func:`default_registry` (DESIGN §6; ``tools/README.md``).

Built-in: ``current_time``, ``memory_save`` / ``memory_search``, ``plan_update`` / ``plan_get``
and ``http_fetch``; ``spawn_task`` (``tools.tasks``) is added by the worker that runs the tasks. Memory and plan tools need the turn's :class:`ToolContext`: run the turn on
``registry.bind(ToolContext(...))``. Plugin modules named by ``PICOBOT_TOOL_MODULES`` add more
through their ``register(registry)``. The registry itself is ``conversations.agent.tool_registry``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from conversations.agent.tool_registry import (
    BoundToolRegistry,
    Tool,
    ToolContext,
    ToolError,
    ToolFatalError,
    ToolOutcome,
    ToolRegistry,
)
from conversations.tools.builtin import current_time_tool

SETTING = "PICOBOT_TOOL_MODULES"


def default_registry(modules: Iterable[str] | None = None) -> ToolRegistry:
    """The registry with PicoBot's built-in tools plus those of the plugin modules.

    Results are bounded by ``settings.PICOBOT.tool_result_max_chars``, the calls of one turn
    running at once by ``settings.PICOBOT.max_tool_calls``, one call's argument text by
    ``settings.PICOBOT.max_tool_argument_bytes`` (UTF-8 bytes); ``http_fetch`` follows
    the ``HTTP_FETCH_*`` settings (``FetchPolicy.from_settings``).

    Args:
        modules: dotted module paths; default ``settings.PICOBOT.tool_modules``.

    Raises:
        ImproperlyConfigured: a module cannot be imported, has no callable ``register``, or its
            ``register`` failed; the message names ``PICOBOT_TOOL_MODULES`` and the module, so a
            bad path stops the server at start-up (the worker builds its registry then).
    """
    # Imported here: memory/plan import the models, and importing this package (or the pure parts
    # of http_fetch) must not need Django's app registry.
    from conversations.tools.http_fetch import http_fetch_tool
    from conversations.tools.memory import memory_tools
    from conversations.tools.plan import plan_tools

    registry = ToolRegistry(
        [current_time_tool(), *memory_tools(), *plan_tools(), http_fetch_tool()],
        max_result_chars=settings.PICOBOT.tool_result_max_chars,
        max_concurrent_calls=settings.PICOBOT.max_tool_calls,
        max_argument_bytes=settings.PICOBOT.max_tool_argument_bytes,
    )
    if modules is None:
        modules = settings.PICOBOT.tool_modules or ()
    for path in modules:
        load_tool_module(str(path).strip(), registry)
    return registry


def load_tool_module(path: str, registry: ToolRegistry) -> None:
    """Import the plugin module ``path`` and call its ``register(registry)``.

    Raises:
        ImproperlyConfigured: see :func:`default_registry`.
    """
    if not path:
        return
    try:
        module = importlib.import_module(path)
    except Exception as exc:  # ImportError, or the module's own code failing at import
        raise ImproperlyConfigured(f"{SETTING}: cannot import tool module {path!r} ({exc})") from exc
    register = getattr(module, "register", None)
    if not callable(register):
        raise ImproperlyConfigured(f"{SETTING}: tool module {path!r} has no register(registry) function")
    try:
        register(registry)
    except Exception as exc:
        raise ImproperlyConfigured(f"{SETTING}: {path}.register(registry) failed ({exc})") from exc


__all__ = [
    "BoundToolRegistry",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolFatalError",
    "ToolOutcome",
    "ToolRegistry",
    "default_registry",
    "load_tool_module",
]
