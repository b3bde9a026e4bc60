"""``manage.py doctor``'s MCP check (issue 18): each configured server (``PICOBOT_CONFIG`` and
the admin) is started or reached once, and its tools are listed (and those left out, with why:
an allow-list name the server lacks is one); then it is stopped again.

Names only: an ``env_from`` / ``headers_env`` value is never printed.
"""

from __future__ import annotations

import asyncio
import os

from conversations.management.commands._doctor_check import FAIL, OK, WARN, Check


def check_mcp(timeout: float) -> list[Check]:
    """OK per reachable server (with its tools), WARN per unreachable or invalid one, FAIL for a
    bad ``[mcp_servers]`` table."""
    from conversations.tools.mcp.sources import read_file_servers

    try:
        read_file_servers()
    except ValueError as exc:
        return [Check(FAIL, "MCP servers", str(exc), "correct PICOBOT_CONFIG (README, MCP tool servers)")]
    return asyncio.run(_probe_all(timeout))


async def _probe_all(timeout: float) -> list[Check]:
    from conversations.tools.mcp.sources import load_servers

    configs, invalid = await load_servers()
    if not configs and not invalid:
        return [Check(OK, "MCP servers", "none configured")]
    checks = [
        Check(WARN, f"MCP server {s.name}", f"not run ({s.last_error})", "fix the admin row") for s in invalid
    ]
    for config in configs:
        checks.append(await _probe(config, timeout))
    return checks


async def _probe(config: object, timeout: float) -> Check:
    from conversations.tools import ToolRegistry
    from conversations.tools.mcp.connection import CONNECTED, FAILED, McpConnection, ServerStatus

    settled = asyncio.Event()  # connected, or failed once

    def changed(status: ServerStatus) -> None:
        if status.state in (CONNECTED, FAILED):
            settled.set()

    connection = McpConnection(
        config, ToolRegistry(), environ=os.environ, connect_timeout=timeout, on_status=changed
    )
    name = f"MCP server {config.name}"
    where = f"{config.transport} {config.public()['target']} (from {config.source})"
    connection.start()
    try:
        async with asyncio.timeout(timeout + 1):
            await settled.wait()
    except TimeoutError:
        pass
    reached, error = connection.connected.is_set(), connection.status.last_error
    tools = ", ".join(connection.status.tools) or "no tools"
    left_out = "; ".join(f"{tool} ({why})" for tool, why in connection.status.skipped.items())
    await connection.stop(timeout=5)
    if reached:
        listing = f"{where}: {tools}" + (f"; left out: {left_out}" if left_out else "")
        if tools != "no tools" or not config.tools:
            return Check(OK, name, listing)
        return Check(WARN, name, listing, "its allow list (tools) names none of the tools it offers")
    return Check(WARN, name, f"{where}: {error or 'no answer'}", "check the command or URL and its variables")
