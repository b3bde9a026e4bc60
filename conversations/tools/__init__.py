"""Agent tools: the registry (validation, timeouts, error results) and the built-in tools.

Operators (and tests) add tools with plugin modules: ``PICOBOT_TOOL_MODULES`` is a comma list of
dotted module paths (``settings.PICOBOT["TOOL_MODULES"]``); each module has a
``register(registry)`` function that calls ``registry.register(Tool(...))`` (issue 5: the
end-to-end restart test plugs in a tool that sleeps until the process is killed).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from conversations.tools.builtin import current_time_tool
from conversations.tools.registry import Tool, ToolOutcome, ToolRegistry

SETTING = "PICOBOT_TOOL_MODULES"


def default_registry(modules: Iterable[str] | None = None) -> ToolRegistry:
    """The registry with PicoBot's built-in tools plus those of the plugin modules.

    Args:
        modules: dotted module paths; default ``settings.PICOBOT["TOOL_MODULES"]``.

    Raises:
        ImproperlyConfigured: a module cannot be imported, has no callable ``register``, or its
            ``register`` failed; the message names ``PICOBOT_TOOL_MODULES`` and the module, so a
            bad path stops the server at start-up (the worker builds its registry then).
    """
    registry = ToolRegistry([current_time_tool()])
    if modules is None:
        modules = settings.PICOBOT.get("TOOL_MODULES") or ()
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


__all__ = ["Tool", "ToolOutcome", "ToolRegistry", "default_registry", "load_tool_module"]
