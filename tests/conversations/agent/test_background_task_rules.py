"""The pure rules of background tasks (issue 18): spawn_task's arguments, results, notification text."""

from __future__ import annotations

import pytest

from conversations.agent.background_tasks import (
    TaskLimits,
    cut_result,
    notification_text,
    spawn_parameters,
    task_request,
)
from conversations.agent.tool_registry import ToolError

CAPS = TaskLimits(max_seconds=600, max_iterations=12, max_tokens=1000)
TOOLS = ["current_time", "http_fetch", "spawn_task"]


def test_a_task_gets_every_tool_but_spawn_task_and_the_caps_by_default():
    request = task_request({"prompt": "  summarise  "}, TOOLS, CAPS)
    assert (request.prompt, request.tools, request.limits) == (
        "summarise",
        ("current_time", "http_fetch"),
        CAPS,
    )


def test_a_task_gets_the_tools_and_limits_it_asks_for():
    request = task_request(
        {"prompt": "x", "tools": ["http_fetch", "http_fetch"], "max_seconds": 30, "max_iterations": 2},
        TOOLS,
        CAPS,
    )
    assert request.tools == ("http_fetch",)
    assert request.limits == TaskLimits(max_seconds=30, max_iterations=2, max_tokens=1000)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"prompt": "   "}, "the prompt is empty"),
        ({"prompt": "x", "tools": ["spawn_task"]}, "cannot start background tasks"),
        ({"prompt": "x", "tools": ["shell"]}, "unknown tools 'shell'; available: current_time, http_fetch"),
        ({"prompt": "x", "max_seconds": 601}, "max_seconds is at most 600"),
        ({"prompt": "x", "max_tokens": 1001}, "max_tokens is at most 1000"),
    ],
)
def test_bad_spawn_task_arguments_are_refused_with_a_reason(arguments, message):
    with pytest.raises(ToolError, match=message):
        task_request(arguments, TOOLS, CAPS)


def test_the_schema_bounds_the_limits_by_the_caps():
    properties = spawn_parameters(CAPS)["properties"]
    assert properties["max_iterations"]["maximum"] == 12 and properties["max_seconds"]["maximum"] == 600


def test_a_long_result_is_cut_with_a_marker_and_the_notification_frames_it():
    assert cut_result("abcdef", 10) == "abcdef"
    assert cut_result("abcdef", 4) == "abcd\n[… 2 more characters of the task's answer were cut]"
    text = notification_text("t1", "failed", "do it", "half done", "ran past its time limit of 5 s")
    assert text.startswith("[Background task t1 failed. This message comes from PicoBot, not from the user")
    assert "Error: ran past its time limit of 5 s" in text and "half done" in text
