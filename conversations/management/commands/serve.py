"""``manage.py serve``: Daphne and the agent worker in one process, one event loop (DESIGN §2).

The embedded mode: HTTP (WebUI, admin, static files via WhiteNoise), the cli_chat WebSocket and
the agent worker share Daphne's asyncio loop; the worker starts from Daphne's ready callback.
SIGTERM/SIGINT stop it gracefully: running turns end per the cancel rules, then the server stops.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.bootstrap import ensure_first_user

MAX_WS_MESSAGE_BYTES = 9 * 1024 * 1024  # an 8 MiB media frame plus JSON overhead (PROTOCOL §1)


class Command(BaseCommand):
    help = "Run PicoBot (WebUI, admin, WebSocket and the agent worker) in one process."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
        parser.add_argument("--no-migrate", action="store_true", help="do not apply migrations at start")

    def handle(self, *args: object, host: str, port: int, no_migrate: bool, **options: object) -> None:
        if not no_migrate:
            call_command("migrate", interactive=False, verbosity=0)
        first_user = ensure_first_user()

        # Daphne installs Twisted's asyncio reactor on import: import it only here.
        from channels.layers import get_channel_layer
        from daphne.server import Server

        from conversations.consumers import process_connections_group
        from conversations.runtime import get_provider
        from conversations.supervisor import close_control_supervisor
        from conversations.worker import AgentWorker, default_worker_id
        from picobot_site.asgi import application

        try:
            provider = get_provider()
        except ValueError as exc:  # a configuration mistake: say what to set, no traceback
            raise CommandError(f"LLM configuration: {exc}") from exc
        try:
            worker = AgentWorker(default_worker_id("serve"), provider=provider)
        except ImproperlyConfigured as exc:  # e.g. PICOBOT_TOOL_MODULES: say what is wrong, no traceback
            raise CommandError(str(exc)) from exc
        interface = host.strip("[]")
        endpoint = f"tcp:port={port}:interface={interface.replace(':', chr(92) + ':')}"
        server: Server

        def announce() -> None:
            addresses = server.listening_addresses or [(host, port)]
            bound_host, bound_port = addresses[0]
            shown = "localhost" if bound_host in {"127.0.0.1", "0.0.0.0", "::", "::1"} else bound_host
            url = f"http://{shown}:{bound_port}/"
            label = "offline replay provider (no LLM configured)" if provider.offline else f"{provider.name} / {provider.model}"
            lines = [f"PicoBot is running at {url}", f"  LLM: {label}"]
            if first_user is not None:
                username, token = first_user
                lines += [
                    f"  First start: created user {username!r}. Log in at {url}login/ with",
                    f"  username {username} and this API token as the password (shown once):",
                    f"  {token}",
                ]
            else:
                lines.append(
                    f"  Log in at {url}login/ with your password, or an API token from "
                    "'python manage.py createtoken USERNAME' as the password."
                )
            lines.append("  Stop with Ctrl+C.")
            self.stdout.write("\n".join(lines))
            self.stdout.flush()

        async def start_worker() -> None:
            try:
                await worker.start()
            except Exception as exc:  # the server is useless without its worker
                self.stderr.write(f"agent worker failed to start: {exc}")
                server.stop()
                return
            announce()

        async def shutdown() -> None:
            # Stop accepting new turns and end running ones per the cancel rules, then close
            # every socket with a close frame (Daphne alone would drop them: clients would see 1006).
            # Control-path tasks (/compact) are cancelled alongside, within the same bound.
            await asyncio.gather(worker.stop(timeout=15), close_control_supervisor(timeout=5))
            try:
                await get_channel_layer().group_send(process_connections_group(), {"type": "server.shutdown"})
                await asyncio.sleep(0.3)  # let the close frames flush
            finally:
                server.stop()

        stopping: list[asyncio.Future] = []

        def on_signal() -> None:
            if not stopping:  # a second Ctrl+C does not start a second shutdown
                stopping.append(asyncio.ensure_future(shutdown()))

        def ready() -> None:
            loop = asyncio.get_event_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, on_signal)
            loop.create_task(start_worker())

        server = Server(
            application,
            endpoints=[endpoint],
            signal_handlers=False,
            ready_callable=ready,
            websocket_max_message_size=MAX_WS_MESSAGE_BYTES,
            websocket_max_frame_size=MAX_WS_MESSAGE_BYTES,
            verbosity=0,
        )
        server.run()
        sys.stdout.flush()
