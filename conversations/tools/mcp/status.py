"""How an MCP server is doing in one worker (issue 18): pure, without the ``mcp`` SDK, so that
the admin, ``doctor`` and a worker with no server configured never import the SDK (~20 MiB)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

STARTING, CONNECTED, FAILED, STOPPED = "starting", "connected", "failed", "stopped"


@dataclass
class ServerStatus:
    """What the admin and ``doctor`` show of one server in one worker.

    Attributes:
        name, source, transport, target: from its configuration (``McpServerConfig.public``).
        state: ``starting`` | ``connected`` | ``failed`` | ``stopped``.
        last_error: why it last failed ("" when it never did), one line, redacted.
        tools: the registry names of its tools (``NAME__tool``).
        skipped: the server's tools left out, name → why (allow list, unusable name, bad schema).
        changed_at: wall-clock seconds of the last change.
    """

    name: str
    source: str
    transport: str
    target: str
    state: str = STARTING
    last_error: str = ""
    tools: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    changed_at: float = field(default_factory=time.time)
