"""Where a worker's MCP servers come from, and where their statuses go (Django glue, issue 18).

Servers: the ``[mcp_servers.NAME]`` tables of ``PICOBOT_CONFIG`` (:func:`read_file_servers`),
then the enabled ``McpServer`` rows of the admin; a row whose name the file already uses, or
that does not validate, is not run and shows as ``failed`` with the reason. Statuses:
``McpServerStatus`` rows keyed by ``(worker_id, name)``; a worker's rows are deleted when it
stops. A worker that dies leaves them: they stop being stamped (``seen_at``), show as gone after
``STATUS_GONE_MS`` and are deleted by any worker's next save after ``STATUS_PRUNE_MS``. :func:`mcp_manager` builds a worker's :class:`McpManager` from the settings.
"""

from __future__ import annotations

import os
import tomllib

from django.conf import settings

from conversations.agent.tool_registry import ToolRegistry
from conversations.storage.runner import run_storage
from conversations.tools.mcp.config import McpServerConfig, load_mcp_servers, parse_server
from conversations.tools.mcp.manager import STATUS_STAMP_SECONDS, McpManager
from conversations.tools.mcp.status import FAILED, ServerStatus

ADMIN_SOURCE = "admin"
STATUS_GONE_MS = int(3 * STATUS_STAMP_SECONDS * 1000)
"""A status row not stamped for this long belongs to a worker that stopped without removing it."""
STATUS_PRUNE_MS = 3_600_000


def read_file_servers() -> list[McpServerConfig]:
    """The servers of the ``PICOBOT_CONFIG`` file as it is now ([] without the file or table).

    Raises:
        ValueError: the file cannot be read or parsed, or a table is bad (the message names
            ``PICOBOT_CONFIG``, the table and the key).
    """
    path = settings.PICOBOT.config
    if path is None:
        return []
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise ValueError(f"PICOBOT_CONFIG={path}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"PICOBOT_CONFIG={path}: not valid TOML ({exc})") from None
    return load_mcp_servers(document)


def admin_servers(taken: set[str]) -> tuple[list[McpServerConfig], list[ServerStatus]]:
    """The enabled admin rows as servers, and the statuses of those that cannot run (DB read)."""
    from conversations.models import McpServer

    configs, invalid = [], []
    for row in McpServer.objects.filter(enabled=True).order_by("name"):
        try:
            if row.name in taken:
                raise ValueError(f"the name {row.name!r} is taken by a [mcp_servers] table of PICOBOT_CONFIG")
            configs.append(parse_server(row.name, row.table(), source=ADMIN_SOURCE))
        except ValueError as exc:
            target = row.target
            # A clash keeps the file's server running under the name: its status must not be
            # overwritten (one status row per worker and name), so this one is named apart.
            name = f"{row.name} (admin)" if row.name in taken else row.name
            invalid.append(
                ServerStatus(name, ADMIN_SOURCE, "stdio" if row.command else "http", target, FAILED, str(exc))
            )
    return configs, invalid


async def load_servers() -> tuple[list[McpServerConfig], list[ServerStatus]]:
    """Every server to run now: the file's, then the admin's (see module docstring).

    Raises:
        ValueError: as :func:`read_file_servers` (the manager keeps its running servers).
    """
    from_file = read_file_servers()
    from_admin, invalid = await run_storage(admin_servers, {server.name for server in from_file})
    return [*from_file, *from_admin], invalid


def save_statuses(worker_id: str, statuses: list[ServerStatus]) -> None:
    """Store ``worker_id``'s statuses, stamped now; its rows of servers not in ``statuses``, and any
    worker's rows not stamped for ``STATUS_PRUNE_MS``, are deleted (DB)."""
    from conversations.models import McpServerStatus, now_ms

    now = now_ms()
    for status in statuses:
        McpServerStatus.objects.update_or_create(
            worker_id=worker_id,
            name=status.name,
            defaults={
                "source": status.source,
                "transport": status.transport,
                "target": status.target,
                "state": status.state,
                "last_error": status.last_error,
                "tools": list(status.tools),
                "skipped": dict(status.skipped),
                "changed_at": status.changed_at,
                "seen_at": now,
            },
        )
    McpServerStatus.objects.filter(worker_id=worker_id).exclude(name__in=[s.name for s in statuses]).delete()
    McpServerStatus.objects.filter(seen_at__lt=now - STATUS_PRUNE_MS).delete()


def mcp_manager(registry: ToolRegistry, worker_id: str, **options: object) -> McpManager:
    """The MCP manager of a worker: servers from :func:`load_servers`, statuses saved under
    ``worker_id``, timeouts and refresh from the settings; ``options`` override (tests)."""

    async def save(statuses: list[ServerStatus]) -> None:
        await run_storage(save_statuses, worker_id, statuses)

    config = settings.PICOBOT
    defaults: dict[str, object] = {
        "save": save,
        "environ": os.environ,
        "refresh_seconds": config.mcp_refresh_seconds,
        "connect_timeout": config.mcp_connect_timeout,
    }
    return McpManager(registry, load_servers, **{**defaults, **options})
