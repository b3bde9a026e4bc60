"""Tool plugin modules: ``PICOBOT_TOOL_MODULES`` → ``default_registry()``.

Each dotted path is imported and its ``register(registry)`` called; a bad path is a start-up error
that names the setting (the end-to-end check is in ``tests/e2e/test_restart.py``).
"""

from __future__ import annotations

import sys
import types

import pytest
from django.core.exceptions import ImproperlyConfigured

from conversations.runtime.worker import AgentWorker
from conversations.tools import Tool, ToolRegistry, default_registry
from providers.testing import ScriptedProvider
from providers.types import ToolCall


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch):
    """``plugin(name, register)`` → an importable module ``name`` with that ``register``."""

    def _make(name: str, register: object = None) -> types.ModuleType:
        module = types.ModuleType(name)
        if register is not None:
            module.register = register
        monkeypatch.setitem(sys.modules, name, module)
        return module

    return _make


BUILT_IN = ["current_time", "memory_save", "memory_search", "plan_update", "plan_get", "http_fetch"]


async def echo(arguments: dict) -> str:
    return f"echo {arguments.get('text', '')}"


def add_echo(registry: ToolRegistry) -> None:
    registry.register(
        Tool("echo", "Echo the text.", {"type": "object", "properties": {"text": {"type": "string"}}}, echo)
    )


def test_no_modules_means_the_built_in_tools(settings):
    settings.PICOBOT = settings.PICOBOT.replace(tool_modules=[])
    assert [d.name for d in default_registry().definitions()] == BUILT_IN


async def test_modules_from_the_setting_add_their_tools(settings, plugin):
    plugin("picobot_test_echo_tools", add_echo)
    settings.PICOBOT = settings.PICOBOT.replace(
        tool_modules=["tests.e2e.slow_tools", "picobot_test_echo_tools"]
    )
    registry = default_registry()
    assert [d.name for d in registry.definitions()] == [*BUILT_IN, "slow_tool", "echo"]
    outcome = await registry.run(ToolCall(id="c1", name="echo", arguments_json='{"text": "hi"}'))
    assert (outcome.content, outcome.is_error) == ("echo hi", False)


def test_explicit_modules_override_the_setting(settings, plugin):
    plugin("picobot_test_echo_tools", add_echo)
    settings.PICOBOT = settings.PICOBOT.replace(tool_modules=["no.such.module"])
    assert "echo" in default_registry(["picobot_test_echo_tools", " "])


@pytest.mark.parametrize(
    ("path", "register", "words"),
    [
        ("picobot_no_such_tools_module", None, ["cannot import", "picobot_no_such_tools_module"]),
        ("picobot_test_no_register", "skip", ["picobot_test_no_register", "no register(registry)"]),
        ("picobot_test_bad_register", "boom", ["picobot_test_bad_register.register", "failed", "boom"]),
    ],
)
def test_a_bad_tool_module_is_a_configuration_error_naming_the_setting(
    settings, plugin, path, register, words
):
    def boom(registry: ToolRegistry) -> None:
        raise RuntimeError("boom")

    if register == "skip":
        plugin(path)
    elif register == "boom":
        plugin(path, boom)
    settings.PICOBOT = settings.PICOBOT.replace(tool_modules=[path])
    with pytest.raises(ImproperlyConfigured) as failed:
        default_registry()
    message = str(failed.value)
    assert message.startswith("PICOBOT_TOOL_MODULES: ")
    for word in words:
        assert word in message


def test_the_worker_builds_its_registry_from_the_setting_at_construction(settings, plugin):
    plugin("picobot_test_echo_tools", add_echo)
    settings.PICOBOT = settings.PICOBOT.replace(tool_modules=["picobot_test_echo_tools"])
    assert "echo" in AgentWorker("t:1", provider=ScriptedProvider([])).tools
    settings.PICOBOT = settings.PICOBOT.replace(tool_modules=["picobot_no_such_tools_module"])
    with pytest.raises(ImproperlyConfigured, match="PICOBOT_TOOL_MODULES"):
        AgentWorker("t:2", provider=ScriptedProvider([]))
