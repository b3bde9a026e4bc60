"""One MCP server, connected through the official ``mcp`` SDK and supervised (issue 18).

:class:`McpConnection` runs a task that starts the server (stdio: a child process with a minimal
environment; HTTP: a streamable HTTP session), initializes the session, lists the tools into the
registry as ``NAME__tool`` and then watches it: a ``notifications/tools/list_changed`` re-lists
(``ToolRegistry.replace_tools``: running turns keep their view), a closed connection or an
unanswered ping reconnects with backoff (1 s doubling to 60 s). Meanwhile the server's tools stay
registered and answer error results, so a turn never waits on a dead server. Every failure is one
log line (a stdio server's last stderr lines included: ``stderr_tail``); the SDK's stdio transport stops the child (stdin closed, then SIGTERM/SIGKILL of its
process tree) when the task ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx2
import mcp_types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conversations.agent.log_safety import describe_exception, log_safe
from conversations.agent.tool_registry import Tool, ToolError, ToolRegistry
from conversations.tools.mcp.config import (
    SEPARATOR,
    TOOL_NAME_PATTERN,
    McpServerConfig,
    http_headers,
    stdio_environment,
)
from conversations.tools.mcp.results import result_text
from conversations.tools.mcp.status import (  # noqa: F401  (re-exported)
    CONNECTED,
    FAILED,
    STARTING,
    STOPPED,
    ServerStatus,
)
from conversations.tools.mcp.stderr_tail import StderrTail

log = logging.getLogger(__name__)

DESCRIPTION_MAX_CHARS = 1024
MAX_TOOLS = 256
"""Tools taken from one server at most (a server listing thousands would swamp every request)."""
MAX_LIST_PAGES = 20
ERROR_MAX_CHARS = 300
CLIENT_INFO = mcp_types.Implementation(name="picobot", version="1")


class McpConnection:
    """The supervised connection to one MCP server; its tools live in ``registry``.

    Args:
        config: the server.
        registry: where its tools are registered (under ``NAME__``) and removed on ``stop``.
        environ: PicoBot's environment (``env_from``, ``headers_env`` and the stdio base come from it).
        connect_timeout: seconds for starting, initializing and listing.
        ping_interval: seconds between liveness pings of an idle connection.
        on_status: called with the :class:`ServerStatus` after every change.
        backoff: first and largest reconnect delay in seconds.
    """

    def __init__(
        self,
        config: McpServerConfig,
        registry: ToolRegistry,
        *,
        environ: Mapping[str, str],
        connect_timeout: float = 30.0,
        ping_interval: float = 15.0,
        on_status: Callable[[ServerStatus], None] | None = None,
        backoff: tuple[float, float] = (1.0, 60.0),
    ) -> None:
        self.config = config
        self.registry = registry
        self.environ = environ
        self.connect_timeout = connect_timeout
        self.ping_interval = ping_interval
        self.on_status = on_status
        self.backoff = backoff
        public = config.public()
        self.status = ServerStatus(config.name, config.source, public["transport"], public["target"])
        self.prefix = config.name + SEPARATOR
        self._session: ClientSession | None = None
        self._wake = asyncio.Event()
        self._lost = ""
        self._relist_wanted = False
        self._stderr: StderrTail | None = None
        self._failing = False
        """The last attempt failed (its restart's stderr is logged at DEBUG)."""
        self._task: asyncio.Task | None = None
        self.connected = asyncio.Event()
        """Set while the session is up (tests wait on it)."""

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> asyncio.Task:
        """Start the supervising task (never blocks on the server)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._supervise())
        return self._task

    async def stop(self, timeout: float = 10.0) -> None:
        """End the session, stop the server (no orphan child) and remove its tools; bounded."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=timeout)
        self.registry.replace_tools(self.prefix, [])
        self.status.tools = []
        self._set(STOPPED)

    async def _supervise(self) -> None:
        delay = self.backoff[0]
        while True:
            self._set(STARTING)
            began = time.monotonic()
            try:
                await self._connect_and_watch()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - an SDK bug or a dying server must not end supervision
                if not self._lost:  # a loss a call saw was logged there: one line per failure
                    error = _error_text(exc)
                    if self._stderr is not None and (tail := await self._stderr.text()):
                        error = log_safe(f"{error}; its stderr ends: {tail}", 4 * ERROR_MAX_CHARS)
                    if error != self.status.last_error:  # a server that stays down is not logged per retry
                        log.warning("MCP server %s failed: %s", self.config.name, log_safe(error))
                    self._set(FAILED, error)
                self._failing = True
            finally:
                self._session = None
                self.connected.clear()
                if self._stderr is not None:
                    stderr, self._stderr = self._stderr, None
                    await stderr.close()
            if time.monotonic() - began > self.backoff[1]:  # it ran a good while: not a crash loop
                delay = self.backoff[0]
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.backoff[1])

    async def _connect_and_watch(self) -> None:
        self._lost, self._relist_wanted = "", False
        self._wake.clear()
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(self.connect_timeout):
                read, write = await stack.enter_async_context(self._transport())
                if self._stderr is not None:
                    self._stderr.spawned()
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._on_message, client_info=CLIENT_INFO)
                )
                await session.initialize()
                await self._relist(session)
            self._session = session
            self.connected.set()
            self._failing = False
            self._set(CONNECTED, "")
            await self._watch(session)

    def _transport(self) -> contextlib.AbstractAsyncContextManager:
        """The SDK transport of the server (stdio child process or streamable HTTP).

        Raises:
            ValueError: an ``env_from`` / ``headers_env`` variable is not set.
        """
        config = self.config
        if config.transport == "stdio":
            env, missing = stdio_environment(config, self.environ)
            if missing:
                raise ValueError(f"env_from: ${missing[0]} is not set")
            self._stderr = StderrTail(config.name, logging.DEBUG if self._failing else logging.INFO)
            return stdio_client(
                StdioServerParameters(command=config.command, args=list(config.args), env=env),
                errlog=self._stderr.file,
            )
        headers, missing = http_headers(config, self.environ)
        if missing:
            raise ValueError(f"headers_env: ${missing[0]} is not set")
        return _http_transport(config.url, headers, self.connect_timeout)

    async def _watch(self, session: ClientSession) -> None:
        """Until the connection is lost: re-list on a tools-changed notification, ping when idle.

        Raises:
            ConnectionError: the connection closed or a ping went unanswered.
        """
        while True:
            try:
                async with asyncio.timeout(self.ping_interval):
                    await self._wake.wait()
            except TimeoutError:
                try:
                    async with asyncio.timeout(self.connect_timeout):
                        await session.send_ping()
                except Exception as exc:
                    raise ConnectionError(f"no answer to a ping ({_error_text(exc)})") from None
                continue
            self._wake.clear()
            if self._lost:
                raise ConnectionError(self._lost)
            if self._relist_wanted:
                self._relist_wanted = False
                async with asyncio.timeout(self.connect_timeout):
                    await self._relist(session)
                self._set(CONNECTED)

    async def _on_message(self, message: Any) -> None:
        """The SDK's message handler: server notifications and transport errors."""
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._relist_wanted = True
            self._wake.set()
        elif isinstance(message, Exception):  # a line that is not JSON-RPC: logged, the session goes on
            log.warning(
                "MCP server %s sent something unreadable: %s",
                self.config.name,
                log_safe(_error_text(message)),
            )

    def _lose(self, reason: str) -> None:
        """The connection is gone: calls answer "not connected" at once; the watch reconnects."""
        self._lost = reason
        self._session = None
        self.connected.clear()
        self._set(FAILED, reason)
        self._wake.set()

    # --- tools ---------------------------------------------------------------------------------
    async def _relist(self, session: ClientSession) -> None:
        """List the server's tools (every page) and swap them into the registry."""
        listed: list[Any] = []
        cursor = None
        for _ in range(MAX_LIST_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        tools, skipped = self._tools_of(listed)
        skipped.update(self.registry.replace_tools(self.prefix, tools))
        self.status.tools = [tool.name for tool in tools if tool.name not in skipped]
        self.status.skipped = skipped
        if skipped:
            log.info("MCP server %s: tools left out: %s", self.config.name, log_safe(", ".join(skipped)))

    def _tools_of(self, listed: list[Any]) -> tuple[list[Tool], dict[str, str]]:
        tools: list[Tool] = []
        skipped: dict[str, str] = {}
        for item in listed:
            own = str(getattr(item, "name", ""))
            if not self.config.allows(own):
                skipped[own] = "not in the tools allow list"
                continue
            name = self.config.tool_name(own)
            if not TOOL_NAME_PATTERN.match(name):
                skipped[own] = f"{name!r} is not a name models accept (letters, digits, _ and -; at most 64)"
                continue
            if len(tools) >= MAX_TOOLS:
                skipped[own] = f"more than {MAX_TOOLS} tools"
                continue
            schema = dict(getattr(item, "input_schema", None) or {})
            schema.setdefault("type", "object")
            description = str(getattr(item, "description", None) or getattr(item, "title", None) or own)
            tools.append(
                Tool(
                    name=name,
                    description=description[:DESCRIPTION_MAX_CHARS],
                    parameters=schema,
                    handler=functools.partial(self.call, own),
                    timeout=self.config.timeout,
                )
            )
        offered = {str(getattr(item, "name", "")) for item in listed}
        for wanted in self.config.tools or ():
            if wanted not in offered:
                skipped[wanted] = "in the tools allow list, but the server has no such tool"
        return tools, skipped

    async def call(self, tool: str, arguments: dict) -> str:
        """Call the server's tool ``tool`` (its own name) and return its text.

        The registry bounds the time (``PICOBOT_TOOL_TIMEOUT`` or the server's ``timeout``).

        Raises:
            ToolError: the server is not connected, the connection closed, the server answered
                an error or something that is not a tool result, or the result is ``isError``.
        """
        name = self.config.name
        session = self._session
        if session is None:
            why = f": {self.status.last_error}" if self.status.last_error else ""
            raise ToolError(f"MCP server {name} is not connected ({self.status.state}{why}); try again later")
        try:
            result = await session.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                self._lose("the connection closed")
                log.warning(
                    "MCP server %s closed the connection during a call of %s", name, log_safe(tool, 200)
                )
                raise ToolError(f"MCP server {name} closed the connection during the call") from None
            message = log_safe(exc.message, ERROR_MAX_CHARS)
            log.warning(
                "MCP server %s answered an error to %s: %s", name, log_safe(tool, 200), log_safe(message)
            )
            raise ToolError(f"MCP server {name}: {message}") from None
        except Exception as exc:  # a validation error of a garbage answer, a transport error
            log.warning(
                "MCP server %s: call of %s failed: %s", name, log_safe(tool, 200), log_safe(_error_text(exc))
            )
            raise ToolError(f"MCP server {name} gave no usable answer ({type(exc).__name__})") from None
        try:
            text, is_error = result_text(result)
        except ValueError as exc:
            log.warning("MCP server %s: %s", name, exc)
            raise ToolError(f"MCP server {name}: {exc}") from None
        if is_error:
            raise ToolError(text or f"{tool} failed (the server gave no message)")
        return text

    def _set(self, state: str, error: str | None = None) -> None:
        self.status.state = state
        if error is not None:
            self.status.last_error = error
        self.status.changed_at = time.time()
        if self.on_status is not None:
            self.on_status(self.status)


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str], connect_timeout: float):
    """The SDK's streamable HTTP transport on our own client (headers; no proxies from the
    environment, which could see the headers)."""
    client = httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(connect_timeout, read=300.0), trust_env=False
    )
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


def _error_text(exc: BaseException) -> str:
    """One redacted line about ``exc``: the first leaf of an exception group, its type and text."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return log_safe(f"MCPError: {exc.message}", ERROR_MAX_CHARS)
    if isinstance(exc, TimeoutError):
        return "timed out"
    return log_safe(describe_exception(exc, with_traceback=False), ERROR_MAX_CHARS)
