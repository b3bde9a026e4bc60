"""MCP tools in turns, end to end (issue 18, Must show 1): a real MCP server built with the
official SDK, over stdio and streamable HTTP, called by a scripted model through the agent worker."""

from __future__ import annotations

import asyncio
import json
import logging
import os

import pytest
from channels.db import database_sync_to_async

from conversations.models import McpServerStatus
from providers.testing import ScriptedProvider, script_text, script_tool_call
from tests.conversations.conftest import make_token
from tests.conversations.tools.mcp.conftest import server_table, stdio_table, worker_options

pytestmark = [pytest.mark.django_db(transaction=True)]


async def connected(worker: object, name: str = "t") -> None:
    await asyncio.wait_for(worker.mcp.connections[name].connected.wait(), 20)


async def run_turn(connect: object, content: str = "go") -> dict:
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": content, "client_msg_id": f"m-{content}"})
    committed = await client.until("turn_committed", timeout=30)
    await client.close()
    return committed


def tool_rows(committed: dict) -> list[dict]:
    return [row for row in committed["messages"] if row["role"] == "tool"]


async def test_a_stdio_server_tool_answers_in_a_turn(connect, start_worker, mcp_config):
    mcp_config(stdio_table())
    provider = ScriptedProvider([script_tool_call("c1", "t__echo", {"text": "hello"}), script_text("Done.")])
    worker = await start_worker(provider, **worker_options())
    await connected(worker)

    committed = await run_turn(connect)

    [row] = tool_rows(committed)
    assert (row["tool_name"], row["content"], row["is_error"]) == ("t__echo", "echo: hello", False)
    assert committed["messages"][-1]["content"] == "Done."
    sent = {tool.name for tool in provider.requests[0].tools}
    assert {"t__echo", "t__slow", "t__die", "current_time"} <= sent
    status = await database_sync_to_async(McpServerStatus.objects.get)(name="t")
    assert status.state == "connected" and "t__echo" in status.tools and status.transport == "stdio"


async def test_an_http_server_tool_answers_in_a_turn_with_headers_from_the_environment(
    connect, start_worker, mcp_config, http_server, monkeypatch
):
    monkeypatch.setenv("MCP_TEST_TOKEN", "Bearer tok-123")
    url = http_server()
    mcp_config(server_table("web", url=url, headers_env={"Authorization": "MCP_TEST_TOKEN"}))
    provider = ScriptedProvider(
        [
            script_tool_call("c1", "web__echo", {"text": "over http"}),
            script_tool_call("c2", "web__headers", {}),
            script_text("Done."),
        ]
    )
    worker = await start_worker(provider, **worker_options())
    await connected(worker, "web")

    committed = await run_turn(connect)

    echo, headers = tool_rows(committed)
    assert (echo["content"], echo["is_error"]) == ("echo: over http", False)
    assert json.loads(headers["content"])["authorization"] == "Bearer tok-123"


async def test_a_server_killed_mid_call_gives_an_error_result_the_turn_completes_and_it_comes_back(
    connect, start_worker, mcp_config, caplog
):
    mcp_config(stdio_table())
    provider = ScriptedProvider(
        [
            script_tool_call("c1", "t__die", {}),
            script_text("The server died."),
            script_tool_call("c2", "t__echo", {"text": "back"}),
            script_text("It is back."),
        ]
    )
    worker = await start_worker(provider, **worker_options())
    await connected(worker)

    committed = await run_turn(connect, "first")

    [row] = tool_rows(committed)
    assert row["is_error"] is True and "MCP server t closed the connection during the call" in row["content"]
    assert committed["messages"][-1]["content"] == "The server died."
    assert [r.message for r in caplog.records if "closed the connection" in r.message] == [
        "MCP server t closed the connection during a call of die"
    ]
    await connected(worker)  # supervised: restarted with backoff
    committed = await run_turn(connect, "second")
    assert [(r["content"], r["is_error"]) for r in tool_rows(committed)] == [("echo: back", False)]


async def test_a_tools_changed_notification_updates_the_registry(connect, start_worker, mcp_config):
    mcp_config(stdio_table())
    provider = ScriptedProvider(
        [
            script_tool_call("c1", "t__grow", {}),
            script_text("Grown."),
            script_tool_call("c2", "t__double", {"x": 21}),
            script_text("Doubled."),
        ]
    )
    worker = await start_worker(provider, **worker_options())
    await connected(worker)
    assert "t__double" not in worker.tools

    await run_turn(connect, "first")
    for _ in range(200):
        if "t__double" in worker.tools:
            break
        await asyncio.sleep(0.05)
    committed = await run_turn(connect, "second")

    assert [(r["content"], r["is_error"]) for r in tool_rows(committed)] == [("42", False)]
    # The first turn kept the tool set it started with; the second one was offered the new tool.
    assert "t__double" not in {t.name for t in provider.requests[1].tools}
    assert "t__double" in {t.name for t in provider.requests[2].tools}


async def test_the_allow_list_filters_tools_and_a_filtered_tool_is_unknown(connect, start_worker, mcp_config):
    mcp_config(stdio_table(tools=["echo", "ech0"]))
    provider = ScriptedProvider([script_tool_call("c1", "t__environment", {}), script_text("No.")])
    worker = await start_worker(provider, **worker_options())
    await connected(worker)

    committed = await run_turn(connect)

    assert sorted(n for n in (d.name for d in worker.tools.definitions()) if n.startswith("t__")) == [
        "t__echo"
    ]
    [row] = tool_rows(committed)
    assert row["is_error"] is True and "unknown tool 't__environment'" in row["content"]
    skipped = worker.mcp.connections["t"].status.skipped
    assert skipped["environment"] == "not in the tools allow list"
    assert skipped["ech0"] == "in the tools allow list, but the server has no such tool"  # a typo is said


async def test_a_slow_server_hits_the_timeout_as_an_error_result_and_stays_usable(
    connect, start_worker, mcp_config
):
    mcp_config(stdio_table(timeout=0.5))
    provider = ScriptedProvider(
        [
            script_tool_call("c1", "t__slow", {"seconds": 30}),
            script_tool_call("c2", "t__echo", {"text": "still here"}),
            script_text("Done."),
        ]
    )
    worker = await start_worker(provider, **worker_options())
    await connected(worker)

    committed = await run_turn(connect)

    slow, echo = tool_rows(committed)
    assert (slow["is_error"], slow["content"]) == (True, "Error: t__slow timed out after 0.5 s")
    assert (echo["is_error"], echo["content"]) == (False, "echo: still here")


async def test_a_stdio_server_gets_a_minimal_environment_without_picobot_secrets(
    start_worker, mcp_config, monkeypatch
):
    monkeypatch.setenv("PICOBOT_SECRET_KEY", "django-secret-value")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-never-leak")
    monkeypatch.setenv("MY_SERVER_TOKEN", "token-for-the-server")
    mcp_config(stdio_table(env={"EXTRA": "1"}, env_from={"TOKEN": "MY_SERVER_TOKEN"}))
    worker = await start_worker(ScriptedProvider([]), **worker_options())
    await connected(worker)

    outcome = await worker.tools.run(_call("t__environment"))

    env = json.loads(outcome.content)
    assert (env["EXTRA"], env["TOKEN"]) == ("1", "token-for-the-server")
    assert env["PATH"] == os.environ["PATH"]
    assert not any(name.startswith("PICOBOT_") for name in env)
    assert "OPENAI_API_KEY" not in env and "MY_SERVER_TOKEN" not in env
    sdk_defaults = {
        "LOGNAME",
        "SHELL",
        "TERM",
        "USER",
        "LC_CTYPE",
    }  # the SDK's list, Python's locale coercion
    assert set(env) <= {"PATH", "HOME", "LANG", "EXTRA", "TOKEN"} | sdk_defaults


async def test_stopping_the_worker_stops_the_stdio_server_process(start_worker, mcp_config, tmp_path):
    pid_file = tmp_path / "server.pid"
    mcp_config(stdio_table(env={"MCP_TEST_PID_FILE": str(pid_file)}))
    worker = await start_worker(ScriptedProvider([]), **worker_options())
    await connected(worker)
    pid = int(pid_file.read_text())
    os.kill(pid, 0)  # running

    await worker.stop(timeout=5)

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not [d.name for d in worker.tools.definitions() if d.name.startswith("t__")]
    assert not await database_sync_to_async(
        McpServerStatus.objects.filter(worker_id=worker.worker_id).exists
    )()


async def test_a_server_that_answers_garbage_or_is_down_never_blocks_the_worker(
    start_worker, mcp_config, caplog
):
    garbage = server_table("junk", command="/bin/sh", args=["-c", "echo not-json-rpc; sleep 30"])
    down = server_table("down", url="http://127.0.0.1:1/mcp")
    mcp_config(stdio_table() + garbage + down)
    worker = await start_worker(ScriptedProvider([]), **worker_options(connect_timeout=2.0))
    await connected(worker)

    for _ in range(200):
        states = {name: c.status.state for name, c in worker.mcp.connections.items()}
        errors = {name: c.status.last_error for name, c in worker.mcp.connections.items()}
        if all(errors[name] for name in ("junk", "down")):
            break
        await asyncio.sleep(0.05)

    assert states["t"] == "connected"
    assert errors["junk"] == "timed out" and errors["down"]
    assert not [d.name for d in worker.tools.definitions() if d.name.startswith(("junk__", "down__"))]
    assert any("MCP server junk sent something unreadable" in r.message for r in caplog.records)
    assert (await worker.tools.run(_call("t__echo", {"text": "ok"}))).content == "echo: ok"


async def test_a_stdio_server_that_dies_at_start_says_why_from_its_stderr(start_worker, mcp_config, caplog):
    caplog.set_level(logging.DEBUG, logger="conversations.tools.mcp.connection")
    script = "echo starting >&2; echo 'ModuleNotFoundError: No module named my_server' >&2; exit 3"
    mcp_config(server_table("crash", command="/bin/sh", args=["-c", script]))
    worker = await start_worker(ScriptedProvider([]), **worker_options(connect_timeout=5.0))
    status = worker.mcp.connections["crash"].status

    def said(level: int) -> list:
        return [r for r in caplog.records if r.levelno == level and "No module named my_server" in r.message]

    for _ in range(200):  # until it was restarted after the failure, and failed again
        if status.last_error and said(logging.DEBUG):
            break
        await asyncio.sleep(0.05)

    assert status.state == "failed"
    assert status.last_error.endswith(
        "; its stderr ends: starting | ModuleNotFoundError: No module named my_server"
    ), status.last_error
    (line,) = said(logging.INFO)  # its stderr once at INFO; a crash loop repeats it at DEBUG only
    assert line.message == "MCP server crash: ModuleNotFoundError: No module named my_server"
    assert len([r for r in said(logging.WARNING) if "failed" in r.message]) == 1


def _call(name: str, arguments: dict | None = None):
    from providers.types import ToolCall

    return ToolCall(id="call_1", name=name, arguments_json=json.dumps(arguments or {}))
