"""A real MCP server built with the official SDK (``MCPServer``), for the MCP client tests.

Run: ``python mcp_test_server.py`` (stdio) or ``python mcp_test_server.py http PORT``
(streamable HTTP at ``http://127.0.0.1:PORT/mcp``). With ``MCP_TEST_PID_FILE`` set it writes its
pid there at start. Tools: ``echo``, ``environment``, ``slow``, ``die``, ``fail``, ``grow``
(adds ``double`` and says the tool list changed), ``headers``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("picobot-test", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@server.tool()
def environment() -> str:
    """The names and values of this process's environment variables, as JSON."""
    return json.dumps(dict(os.environ), sort_keys=True)


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "slept"


@server.tool()
async def die() -> str:
    """Exit the whole server process in the middle of the call."""
    os._exit(3)


@server.tool()
def fail() -> str:
    """A tool that reports an error."""
    raise ValueError("the fail tool always fails")


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool ``double`` and notify the client that the tool list changed."""

    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    server.add_tool(double, name="double")
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
def headers(ctx: Context) -> str:
    """The HTTP request headers this call came with (HTTP transport), as JSON."""
    return json.dumps(dict(ctx.headers or {}), sort_keys=True)


if __name__ == "__main__":
    pid_file = os.environ.get("MCP_TEST_PID_FILE")
    if pid_file:
        with open(pid_file, "w") as handle:
            handle.write(str(os.getpid()))
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
