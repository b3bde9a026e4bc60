"""MCP servers for operators: admin rows (superuser-only), the status page, a changed row picked
up by the worker's refresh, and serve/runagent refusing a bad ``[mcp_servers]`` table at start."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from io import StringIO

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from conversations.models import McpServer, McpServerStatus
from conversations.tools import ToolRegistry
from conversations.tools.mcp.sources import mcp_manager
from tests.conversations.tools.mcp.conftest import SERVER, stdio_table

FORM = {
    "name": "files",
    "enabled": "on",
    "command": sys.executable,
    "args": f'["{SERVER}"]',
    "env": "{}",
    "env_from": '{"TOKEN": "FILES_TOKEN"}',
    "url": "",
    "headers_env": "{}",
    "tools": "",
    "timeout": "",
}


@pytest.fixture
def superuser_client(client):
    client.force_login(get_user_model().objects.create_superuser("root", password="pw-for-tests"))
    return client


@pytest.fixture
def staff_client(client):
    user = get_user_model().objects.create_user("staff", password="pw-for-tests", is_staff=True)
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_a_superuser_adds_a_server_and_a_bad_row_is_refused_naming_the_key(superuser_client):
    bad = superuser_client.post(
        "/admin/conversations/mcpserver/add/", {**FORM, "env_from": '{"TOKEN": "not a name"}'}
    )
    assert (
        bad.status_code == 200
        and "[mcp_servers.files].env_from.TOKEN must name an environment variable" in (bad.content.decode())
    )
    both = superuser_client.post("/admin/conversations/mcpserver/add/", {**FORM, "url": "http://h/mcp"})
    assert "set either command" in both.content.decode()
    empty = superuser_client.post("/admin/conversations/mcpserver/add/", {**FORM, "tools": "[]"})
    assert "an empty list would offer no tool: leave the field blank" in str(
        empty.context["adminform"].form.errors["tools"]
    )

    added = superuser_client.post("/admin/conversations/mcpserver/add/", FORM)

    assert added.status_code == 302
    row = McpServer.objects.get(name="files")
    assert row.env_from == {"TOKEN": "FILES_TOKEN"} and row.args == [str(SERVER)]
    assert row.tools is None  # a blank field: all its tools


@pytest.mark.django_db
def test_staff_who_are_not_superusers_may_look_but_not_add_or_change(staff_client):
    row = McpServer.objects.create(name="files", command="x")
    assert staff_client.get("/admin/conversations/mcpserver/").status_code == 200
    assert staff_client.get("/admin/conversations/mcpserver/add/").status_code == 403
    assert staff_client.post("/admin/conversations/mcpserver/add/", FORM).status_code == 403
    staff_client.post(f"/admin/conversations/mcpserver/{row.pk}/change/", {**FORM, "command": "evil"})
    assert McpServer.objects.get(pk=row.pk).command == "x"


@pytest.mark.django_db
def test_the_status_page_lists_file_and_admin_servers_with_their_state_and_never_a_secret(
    superuser_client, mcp_config, monkeypatch
):
    monkeypatch.setenv("FILES_TOKEN", "very-secret-token-value")
    mcp_config(stdio_table("t", env_from={"TOKEN": "FILES_TOKEN"}))
    McpServer.objects.create(
        name="web", url="http://127.0.0.1:9/mcp", headers_env={"Authorization": "WEB_AUTH"}
    )
    McpServerStatus.objects.create(
        worker_id="host:1",
        name="t",
        source="PICOBOT_CONFIG",
        transport="stdio",
        state="connected",
        tools=["t__echo"],
    )
    McpServerStatus.objects.create(
        worker_id="host:1", name="web", source="admin", transport="http", state="failed", last_error="refused"
    )

    index = superuser_client.get("/admin/").content.decode()
    page = superuser_client.get("/admin/mcp-servers/").content.decode()

    assert 'href="/admin/mcp-servers/"' in index
    assert (
        "t__echo" in page and "connected" in page and "refused" in page and "http://127.0.0.1:9/mcp" in page
    )
    assert "very-secret-token-value" not in page


async def test_a_changed_admin_row_is_picked_up_at_the_next_refresh(transactional_db, mcp_config):
    mcp_config("")
    registry = ToolRegistry()
    manager = mcp_manager(registry, "host:refresh", refresh_seconds=0, backoff=(0.1, 0.5))
    await manager.start()
    assert manager.connections == {}
    row = await database_sync_to_async(McpServer.objects.create)(
        name="files", command=sys.executable, args=[str(SERVER)], tools=["echo"]
    )
    try:
        await manager.refresh()
        await asyncio.wait_for(manager.connections["files"].connected.wait(), 20)
        assert [d.name for d in registry.definitions()] == ["files__echo"]

        row.tools = ["echo", "slow"]
        await database_sync_to_async(row.save)()
        await manager.refresh()
        await asyncio.wait_for(manager.connections["files"].connected.wait(), 20)
        assert sorted(d.name for d in registry.definitions()) == ["files__echo", "files__slow"]
        for _ in range(100):
            if await database_sync_to_async(
                McpServerStatus.objects.filter(name="files", state="connected").exists
            )():
                break
            await asyncio.sleep(0.05)
        status = await database_sync_to_async(McpServerStatus.objects.get)(
            worker_id="host:refresh", name="files"
        )
        assert status.source == "admin" and status.state == "connected"

        await database_sync_to_async(McpServer.objects.filter(pk=row.pk).update)(enabled=False)
        await manager.refresh()
        assert manager.connections == {} and registry.definitions() == []
    finally:
        await manager.stop(timeout=5)


async def test_an_admin_row_whose_name_the_file_uses_does_not_run_and_says_why(transactional_db, mcp_config):
    mcp_config(stdio_table("t"))
    await database_sync_to_async(McpServer.objects.create)(name="t", url="http://127.0.0.1:9/mcp")
    manager = mcp_manager(ToolRegistry(), "host:clash", refresh_seconds=0)
    await manager.start()
    try:
        [invalid] = manager.invalid
        assert (
            invalid.state == "failed"
            and "taken by a [mcp_servers] table of PICOBOT_CONFIG" in invalid.last_error
        )
        assert manager.connections["t"].config.source == "PICOBOT_CONFIG"
    finally:
        await manager.stop(timeout=5)


@pytest.mark.django_db
@pytest.mark.parametrize("command", ["runagent", "serve"])
def test_serve_and_runagent_refuse_a_bad_mcp_table_at_start(mcp_config, command):
    mcp_config('[mcp_servers.a]\ncommand = "x"\ncomand = "typo"\n')
    with pytest.raises(CommandError) as raised:
        call_command(command, stdout=StringIO(), stderr=StringIO())
    assert str(raised.value).startswith(
        "MCP configuration: PICOBOT_CONFIG: [mcp_servers.a]: unknown key 'comand'"
    )


@pytest.mark.django_db(transaction=True)
def test_doctor_starts_each_server_once_and_lists_its_tools(mcp_config):
    mcp_config(
        stdio_table("t", tools=["echo", "slow", "sloww"])
        + '[mcp_servers.down]\nurl = "http://127.0.0.1:1/mcp"\n'
    )
    out = StringIO()
    with contextlib.suppress(CommandError):  # the unreachable server is a WARN; other checks may FAIL here
        call_command("doctor", "--no-llm-request", "--timeout", "10", stdout=out, stderr=StringIO())
    text = out.getvalue()
    assert (
        "OK   MCP server t: stdio " in text and "(from PICOBOT_CONFIG): t__echo, t__slow; left out: " in text
    )
    assert "sloww (in the tools allow list, but the server has no such tool)" in text
    assert "WARN MCP server down: http http://127.0.0.1:1/mcp (from PICOBOT_CONFIG): ConnectError" in text


@pytest.mark.django_db
def test_doctor_fails_a_bad_mcp_table_naming_it(mcp_config):
    mcp_config('[mcp_servers.a]\nurl = "ftp://x"\n')
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("doctor", "--no-llm-request", stdout=out, stderr=StringIO())
    assert "FAIL MCP servers: PICOBOT_CONFIG: [mcp_servers.a].url must be an http(s) URL" in out.getvalue()


def test_an_admin_row_named_like_a_file_server_never_hides_that_servers_status(db):
    """The file's server runs under the name; the refused admin row gets a status of its own."""
    from conversations.tools.mcp.sources import admin_servers, save_statuses
    from conversations.tools.mcp.status import CONNECTED, ServerStatus

    McpServer.objects.create(name="trial", command="x")
    configs, invalid = admin_servers({"trial"})
    running = ServerStatus("trial", "PICOBOT_CONFIG", "stdio", "python", CONNECTED, tools=["trial__add"])
    save_statuses("host:1", [running, *invalid])
    rows = dict(McpServerStatus.objects.values_list("name", "state"))
    assert configs == [] and rows == {"trial": "connected", "trial (admin)": "failed"}
    (refused,) = invalid
    assert "taken by a [mcp_servers] table of PICOBOT_CONFIG" in refused.last_error


@pytest.mark.django_db
def test_rows_of_a_worker_that_died_show_as_gone_and_are_pruned(superuser_client):
    """A crashed worker never deletes its status rows: they stop being stamped (``seen_at``)."""
    from conversations.models import now_ms
    from conversations.tools.mcp.sources import STATUS_GONE_MS, STATUS_PRUNE_MS, save_statuses
    from conversations.tools.mcp.status import CONNECTED, ServerStatus

    now = now_ms()
    for worker_id, seen_at in [("host:live", now), ("host:dead", now - STATUS_GONE_MS - 120_000)]:
        McpServerStatus.objects.create(
            worker_id=worker_id,
            name="t",
            source="admin",
            transport="stdio",
            state="connected",
            seen_at=seen_at,
        )
    McpServer.objects.create(name="t", command="python", args=["-m", "my_server", "--root", "/srv"])

    page = superuser_client.get("/admin/mcp-servers/").content.decode()

    assert page.count("gone?") == 1 and "has not reported for 5 min; was connected" in page
    assert "<code>python -m my_server --root /srv</code>" in page  # the admin row's args too
    McpServerStatus.objects.filter(worker_id="host:dead").update(seen_at=now - STATUS_PRUNE_MS - 1)
    save_statuses("host:live", [ServerStatus("t", "admin", "stdio", "python", CONNECTED)])
    assert list(McpServerStatus.objects.values_list("worker_id", flat=True)) == ["host:live"]


async def test_a_worker_stamps_its_statuses_even_when_nothing_changes():
    saves: list[int] = []

    async def save(statuses: list) -> None:
        saves.append(len(statuses))

    async def load() -> tuple[list, list]:
        return [], []

    from conversations.tools.mcp.manager import McpManager

    manager = McpManager(ToolRegistry(), load, save=save, environ={}, refresh_seconds=0)
    manager.stamp_seconds = 0.05
    await manager.start()
    try:
        async with asyncio.timeout(5):
            while len(saves) < 3:  # noqa: ASYNC110 - the manager's own loop writes
                await asyncio.sleep(0.02)
    finally:
        await manager.stop(timeout=1)


@pytest.mark.django_db(transaction=True)
def test_doctor_warns_when_the_allow_list_names_none_of_the_servers_tools(mcp_config):
    mcp_config(stdio_table("t", tools=["ech0"]))
    out = StringIO()
    with contextlib.suppress(CommandError):
        call_command("doctor", "--no-llm-request", "--timeout", "10", stdout=out, stderr=StringIO())
    text = out.getvalue()
    assert "WARN MCP server t: stdio " in text and ": no tools; left out: " in text
    assert "its allow list (tools) names none of the tools it offers" in text
