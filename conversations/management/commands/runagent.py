"""``manage.py runagent``: an agent worker process for the scale-out mode (DESIGN §2).

Receives ``picobot.agent`` layer messages (not a wrapper around ``runworker``, which buffers
without bound and ignores SIGTERM), runs dialog turns, and on SIGTERM/SIGINT ends running turns
per the cancel rules before exiting.
"""

from __future__ import annotations

import asyncio
import signal

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, CommandParser

from conversations.management.commands._common import (
    LAYER_CHECK_SECONDS,
    PicoBotCommand,
    apply_switch_interval,
    layer_round_trip,
    provider_config_error,
    require_database,
    start_failure,
)


class Command(PicoBotCommand):
    help = "Run an agent worker (scale-out mode: N × daphne + M × runagent sharing Redis/PostgreSQL)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--worker-id", default="", help="stable worker id (default host:pid)")

    def handle(self, *args: object, worker_id: str, **options: object) -> None:
        from conversations.runtime.provider import get_provider
        from conversations.tools import default_registry
        from conversations.tools.mcp.sources import read_file_servers

        require_database()  # unmigrated or unreachable: one line now, not a log of failing scans
        try:
            get_provider()
        except ValueError as exc:  # a configuration mistake: say what to set, no traceback
            raise provider_config_error(exc) from exc
        try:
            default_registry()  # PICOBOT_TOOL_MODULES errors before anything starts
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        try:
            read_file_servers()  # a bad [mcp_servers] table stops the start, naming table and key
        except ValueError as exc:
            raise CommandError(f"MCP configuration: {exc}") from exc
        apply_switch_interval()
        asyncio.run(self._run(worker_id))

    async def _run(self, worker_id: str) -> None:
        from channels.layers import get_channel_layer

        from conversations.runtime.supervisor import close_control_supervisor
        from conversations.runtime.worker import AgentWorker, default_worker_id
        from conversations.usage.writer import flush_usage

        try:  # the layer first: without it the worker's consumer would only restart and fail, loudly
            await asyncio.wait_for(layer_round_trip(get_channel_layer()), LAYER_CHECK_SECONDS)
        except Exception as exc:
            raise CommandError(f"agent worker failed to start: {start_failure(exc)}") from None
        worker = AgentWorker(worker_id or default_worker_id("runagent"))
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopped.set)
        await worker.start()
        self.stdout.write(f"agent worker {worker.worker_id} running; Ctrl+C to stop")
        await stopped.wait()
        # Control-path tasks (/compact) are cancelled alongside, within the same bound.
        await asyncio.gather(worker.stop(timeout=15), close_control_supervisor(timeout=5))
        await flush_usage(timeout=5)  # the usage rows of the last calls (/compact ones too)
