"""``McpManager``: every MCP server of one agent worker, their tools in its registry (issue 18).

The worker starts it with itself (``AgentWorker.start``; ``manage.py serve`` and ``runagent``)
and stops it with itself. ``start`` never waits for a server: each connection is its own
supervised task (``connection.McpConnection``). Every ``refresh_seconds`` the manager reads the
configuration again (``load``: the ``PICOBOT_CONFIG`` file as loaded at start, plus the admin's
database rows) and starts, restarts or stops the servers that appeared, changed or went away.
Statuses go to ``save`` (the database, for the admin) after each change, one write at a time,
and at least every ``STATUS_STAMP_SECONDS`` (so the admin can tell a worker that died).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from conversations.agent.log_safety import log_safe
from conversations.agent.tool_registry import ToolRegistry
from conversations.tools.mcp.config import McpServerConfig
from conversations.tools.mcp.status import ServerStatus

if TYPE_CHECKING:
    from conversations.tools.mcp.connection import McpConnection

log = logging.getLogger(__name__)

LoadServers = Callable[[], Awaitable[tuple[list[McpServerConfig], list[ServerStatus]]]]
"""The servers to run now, and the statuses of those that cannot run (a bad admin row)."""
SaveStatuses = Callable[[list[ServerStatus]], Awaitable[None]]

STATUS_STAMP_SECONDS = 60.0
"""A worker saves its statuses at least this often, changed or not: a live worker's ``seen_at``."""


class McpManager:
    """The MCP connections of one worker.

    Args:
        registry: the worker's tool registry.
        load: the configured servers (see :data:`LoadServers`); its errors are logged and the
            running servers kept.
        save: stores the statuses (None: kept in memory only, ``statuses()``).
        environ: PicoBot's environment (for ``env_from`` / ``headers_env``).
        refresh_seconds: how often ``load`` runs again (0: only at start).
        connection_options: passed to every :class:`McpConnection` (timeouts, ping, backoff).
    """

    def __init__(
        self,
        registry: ToolRegistry,
        load: LoadServers,
        *,
        save: SaveStatuses | None = None,
        environ: Mapping[str, str],
        refresh_seconds: float = 30.0,
        **connection_options: object,
    ) -> None:
        self.registry = registry
        self.load = load
        self.save = save
        self.environ = environ
        self.refresh_seconds = refresh_seconds
        self.stamp_seconds = STATUS_STAMP_SECONDS
        self.connection_options = connection_options
        self.connections: dict[str, McpConnection] = {}
        self.invalid: list[ServerStatus] = []
        self._dirty = asyncio.Event()
        self._loops: list[asyncio.Task] = []

    async def start(self) -> None:
        """Load the servers and start their connections; never waits for a server to answer."""
        await self.refresh()
        if self.save is not None:
            self._loops.append(asyncio.ensure_future(self._save_loop()))
        if self.refresh_seconds > 0:
            self._loops.append(asyncio.ensure_future(self._refresh_loop()))

    async def refresh(self) -> None:
        """Apply the configuration as ``load`` gives it now (a changed server restarts)."""
        try:
            configs, invalid = await self.load()
        except Exception as exc:
            log.warning("MCP servers: could not read the configuration: %s", log_safe(str(exc)))
            return
        wanted = {config.name: config for config in configs}
        if wanted:  # the SDK is imported only once a server is configured
            from conversations.tools.mcp.connection import McpConnection
        for name, connection in list(self.connections.items()):
            if wanted.get(name) != connection.config:
                del self.connections[name]
                await connection.stop()
                log.info("MCP server %s stopped (%s)", name, "changed" if name in wanted else "removed")
        for name, config in wanted.items():
            if name not in self.connections:
                connection = McpConnection(
                    config,
                    self.registry,
                    environ=self.environ,
                    on_status=self._changed,
                    **self.connection_options,
                )
                self.connections[name] = connection
                connection.start()
        self.invalid = invalid
        self._dirty.set()

    def statuses(self) -> list[ServerStatus]:
        """Every server's status: the running connections, then the ones that cannot run."""
        return [c.status for c in self.connections.values()] + list(self.invalid)

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop every server (children included) within ``timeout`` seconds; then ``save([])``
        (the worker's status rows go: it runs no server any more)."""
        for task in self._loops:
            task.cancel()
        connections, self.connections = list(self.connections.values()), {}
        if connections:
            await asyncio.wait(
                [asyncio.ensure_future(c.stop(timeout=timeout)) for c in connections], timeout=timeout + 1
            )
        if self._loops:
            await asyncio.wait(self._loops, timeout=1)
        if self.save is not None:
            try:
                async with asyncio.timeout(2):
                    await self.save([])
            except Exception:
                log.warning("MCP servers: could not save their stopped state", exc_info=True)

    def _changed(self, status: ServerStatus) -> None:
        self._dirty.set()

    async def _save_loop(self) -> None:
        assert self.save is not None
        while True:
            try:
                async with asyncio.timeout(self.stamp_seconds):
                    await self._dirty.wait()
            except TimeoutError:
                pass  # nothing changed: stamp the rows anyway
            self._dirty.clear()
            try:
                await self.save(self.statuses())
            except Exception as exc:
                log.warning("MCP servers: could not save their status: %s", log_safe(str(exc)))
            await asyncio.sleep(0.2)  # a burst of changes is one write

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_seconds)
            await self.refresh()
