"""A test-only plugin for the real ``serve`` (``PICOBOT_TOOL_MODULES=tests.faults.serve_plugin``).

It adds the tools the process scenarios call — ``lookup`` (answers at once) and ``slow_tool``
(sleeps 300 s: the process is killed inside it) — and, when ``FAULTS_COMMIT_PAUSE`` names a file,
the hook that makes "inside the commit transaction" reachable: the commit of a turn whose user
message contains :data:`PAUSE_MARK` writes its rows inside an outer transaction, creates that file
and sleeps there until the process is killed (SQLite rolls the transaction back). Nothing of the
product reads it: the plugin replaces ``storage.commit_turn``, which the executor calls through the
``storage`` namespace (``conversations/storage/README.md``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.db import transaction

from conversations import storage
from conversations.models import InboxMessage
from conversations.tools import Tool, ToolRegistry
from tests.e2e.slow_tools import register as register_slow_tool

LOOKUP = "lookup"
PAUSE_MARK = "PAUSE-IN-COMMIT"
PAUSE_FILE_ENV = "FAULTS_COMMIT_PAUSE"


async def lookup(arguments: dict) -> str:
    return "The record says 42."


def pausing_commit(real_commit: Any, marker: Path) -> Any:
    """``real_commit``, except for a turn of a :data:`PAUSE_MARK` message: its rows are written
    inside an outer transaction that never ends (``marker`` is created once they are)."""

    def commit_turn(
        dialog_id: str, worker_id: str, epoch: int, inbox_id: str, *args: Any, **kwargs: Any
    ) -> Any:
        content = InboxMessage.objects.filter(pk=inbox_id).values_list("content", flat=True).first() or ""
        if PAUSE_MARK not in content:
            return real_commit(dialog_id, worker_id, epoch, inbox_id, *args, **kwargs)
        with transaction.atomic():
            real_commit(dialog_id, worker_id, epoch, inbox_id, *args, **kwargs)
            marker.write_text(inbox_id)
            while True:  # until SIGKILL: the transaction is never committed
                time.sleep(1)

    return commit_turn


def register(registry: ToolRegistry) -> None:
    """Plugin entry point: ``lookup``, ``slow_tool`` and (with ``FAULTS_COMMIT_PAUSE``) the hook."""
    registry.register(
        Tool(
            name=LOOKUP,
            description="Look the answer up (test tool).",
            parameters={"type": "object", "properties": {}, "additionalProperties": False},
            handler=lookup,
            timeout=5.0,
        )
    )
    register_slow_tool(registry)
    marker = os.environ.get(PAUSE_FILE_ENV)
    if marker and not getattr(storage.commit_turn, "pauses", False):
        storage.commit_turn = pausing_commit(storage.commit_turn, Path(marker))
        storage.commit_turn.pauses = True
