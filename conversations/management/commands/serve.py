"""``manage.py serve``: Daphne and the agent worker in one process, one event loop (DESIGN §2).

The embedded mode: HTTP (WebUI, admin, static files via WhiteNoise), the cli_chat WebSocket and
the agent worker share Daphne's asyncio loop; the worker starts from Daphne's ready callback.
SIGTERM/SIGINT stop it gracefully: running turns end per the cancel rules, then the server stops.

HTTP request bodies over 3 MiB are refused with 413 while they arrive, before Daphne buffers them
(``_http_guard``); a WebSocket whose client leaves more than ``PICOBOT_WS_MAX_UNSENT_BYTES`` of
output unread is closed with 4408 (``_ws_guard``); a client message over 9 MiB is discarded as it
arrives and answered with an ``error`` frame, and a client that breaks the WebSocket protocol
(e.g. invalid UTF-8: 1007) gets a close frame, not a dropped connection (``_ws_input``).
``--no-worker`` serves HTTP and WebSockets only, for the scale-out mode, where ``runagent`` processes run the turns. The worker starts only once a message went through the channel layer and back;
when it cannot start, ``serve`` exits 1 saying why (e.g. Redis unreachable) — no turn runs first.

When it cannot listen (the port is taken, the address is not this machine's, a privileged port),
``serve`` exits 1 with one line (``cannot listen on 127.0.0.1:8000: address already in use …``)
before the first-start user is created, so its token is never shown for a server that did not
start. ``--host`` (an IP address or a host name, never empty: Twisted would take "" as every
interface) and ``--port`` (0–65535, 0 picks a free one) are checked first: exit 2, as argparse.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import ipaddress
import re
import signal
import sys
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError, CommandParser

from conversations.management.commands._common import (
    LAYER_CHECK_SECONDS,
    PicoBotCommand,
    apply_switch_interval,
    bounded_int,
    layer_round_trip,
    provider_config_error,
    require_database,
    start_failure,
)
from conversations.runtime.bootstrap import ensure_first_user, undo_first_user

MAX_WS_MESSAGE_BYTES = 9 * 1024 * 1024  # an 8 MiB media frame plus JSON overhead (PROTOCOL §1)


class Command(PicoBotCommand):
    help = "Run PicoBot (WebUI, admin, WebSocket and the agent worker) in one process."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--host",
            type=_host,
            default="127.0.0.1",
            help="interface to listen on: an IP address or host name (default 127.0.0.1; 0.0.0.0 for all)",
        )
        parser.add_argument(
            "--port",
            type=bounded_int(0, 65535, " (0 picks a free one)"),
            default=8000,
            help="TCP port (default 8000; 0 picks a free one)",
        )
        parser.add_argument("--no-migrate", action="store_true", help="do not apply migrations at start")
        parser.add_argument(
            "--no-worker",
            action="store_true",
            help="serve HTTP and WebSockets only; turns run in 'manage.py runagent' processes "
            "(the scale-out mode: needs PICOBOT_REDIS_URL; start several with --no-migrate, "
            "after one 'manage.py migrate')",
        )

    def handle(
        self,
        *args: object,
        host: str,
        port: int,
        no_migrate: bool,
        no_worker: bool = False,
        **options: object,
    ) -> None:
        if no_worker and not getattr(settings, "REDIS_URL", ""):
            raise CommandError(
                "--no-worker needs PICOBOT_REDIS_URL: without a shared channel layer no "
                "runagent process would hear this one's messages"
            )
        if not no_migrate:
            call_command("migrate", interactive=False, verbosity=0)
        require_database()
        apply_switch_interval()

        # Daphne installs Twisted's asyncio reactor on import: import it only here.
        from channels.layers import get_channel_layer
        from daphne.server import Server

        from conversations.chat.consumer import process_connections_group
        from conversations.management.commands._http_guard import install_body_limit
        from conversations.management.commands._ws_guard import install_output_bound
        from conversations.management.commands._ws_input import install_input_limit
        from conversations.runtime.provider import get_provider
        from conversations.runtime.supervisor import close_control_supervisor
        from conversations.runtime.worker import AgentWorker, default_worker_id
        from conversations.tools.mcp.sources import read_file_servers
        from conversations.usage.writer import flush_usage
        from picobot_site.asgi import application

        worker: AgentWorker | None = None
        try:
            provider = get_provider()
        except ValueError as exc:  # a configuration mistake: say what to set, no traceback
            raise provider_config_error(exc) from exc
        if not no_worker:
            try:
                read_file_servers()  # a bad [mcp_servers] table stops the start, naming table and key
            except ValueError as exc:
                raise CommandError(f"MCP configuration: {exc}") from exc
            try:
                # No provider given: each turn gets its dialog's preset (and fallbacks) from the
                # catalog; a provider passed in would answer for every preset (the tests' seam).
                worker = AgentWorker(default_worker_id("serve"))
            except ImproperlyConfigured as exc:  # e.g. PICOBOT_TOOL_MODULES: say what is wrong, no traceback
                raise CommandError(str(exc)) from exc
        interface = host.strip("[]")
        endpoint = f"tcp:port={port}:interface={interface.replace(':', chr(92) + ':')}"
        server: Any
        first_user: tuple[str, str] | None = None

        def announce() -> None:
            addresses = server.listening_addresses or [(host, port)]
            bound_host, bound_port = addresses[0]
            shown = "localhost" if bound_host in {"127.0.0.1", "0.0.0.0", "::", "::1"} else bound_host
            url = f"http://{shown}:{bound_port}/"
            label = (
                "offline replay provider (no LLM configured)"
                if provider.offline
                else f"{provider.name} / {provider.model}"
            )
            lines = [f"PicoBot is running at {url}", f"  LLM: {label}"]
            if worker is None:
                lines.append("  Turns run in the 'manage.py runagent' processes (--no-worker).")
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
                    "'.venv/bin/python manage.py createtoken USERNAME' as the password."
                )
            lines.append("  Stop with Ctrl+C.")
            self.stdout.write("\n".join(lines))
            self.stdout.flush()

        failures: list[str] = []

        async def start_worker() -> None:
            try:
                # The channel layer first: without it no stop, replay or snapshot reaches anyone,
                # so no turn may start (the worker's inbox scan would run them regardless).
                await asyncio.wait_for(layer_round_trip(get_channel_layer()), LAYER_CHECK_SECONDS)
                if worker is not None:
                    await worker.start()
            except Exception as exc:  # the server is useless without its worker
                failures.append(start_failure(exc))
                if worker is not None:
                    with contextlib.suppress(Exception):
                        await worker.stop(timeout=5)  # whatever it began (turns, loops) ends now
                server.stop()
                return
            announce()

        async def shutdown() -> None:
            # Stop accepting new turns and end running ones per the cancel rules, then close
            # every socket with a close frame (Daphne alone would drop them: clients would see 1006).
            # Control-path tasks (/compact) are cancelled alongside, within the same bound.
            await asyncio.gather(
                *([worker.stop(timeout=15)] if worker is not None else []),
                close_control_supervisor(timeout=5),
            )
            await flush_usage(timeout=5)  # the usage rows of the last calls (/compact ones too)
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
            nonlocal first_user
            # Listening (Daphne calls this only when every endpoint listens), the loop not running
            # yet: a synchronous DB call is allowed, and the first user's token is only made for a
            # server that will announce it.
            # Scale-out web processes (--no-worker) start side by side: users come from createtoken.
            first_user = ensure_first_user() if worker is not None else None
            # Not accepting yet: every connection gets the body limit.
            install_body_limit(server.http_factory)
            install_output_bound(server.ws_factory, settings.PICOBOT.ws_max_unsent_bytes)
            install_input_limit(server.ws_factory, MAX_WS_MESSAGE_BYTES)
            loop = asyncio.get_event_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, on_signal)
            loop.create_task(start_worker())

        server = _recording_listen_failures(Server)(
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
        if server.listen_failure is not None:
            raise CommandError(_listen_failure(interface, port, server.listen_failure))
        if failures:
            if first_user is not None:
                # Its token was never shown: undo it, so the next start that works makes and
                # announces a new one (the loop has ended: a synchronous DB call is allowed).
                undo_first_user(first_user[0])
            what = "agent worker failed to start" if worker is not None else "could not start"
            raise CommandError(f"{what}: {failures[0]}")


_HOST_NAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
)


def _host(text: str) -> str:
    """``--host``: an IP address (IPv6 with or without brackets) or a DNS host name, else a usage
    error. Refused up front because Twisted reads "" as every interface and would read ``=``,
    ``\\`` or ``:`` as endpoint syntax."""
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ipaddress.ip_address(bare)
        return text
    except ValueError:
        if bare == text and _HOST_NAME.fullmatch(text):
            return text
    raise argparse.ArgumentTypeError(
        f"must be an IP address or a host name (e.g. 127.0.0.1, 0.0.0.0, ::1), got {text!r}"
    )


def _recording_listen_failures(server_class: type) -> type:
    """Daphne's ``Server`` class made to keep why it could not listen in ``listen_failure`` (the
    exception, else None) before it stops. Daphne itself only logs "Listen failure" and returns
    from ``run()`` as if all went well (exit 0). A class built here: Daphne may only be imported
    in ``handle`` (it installs Twisted's asyncio reactor on import)."""

    class ListeningServer(server_class):
        listen_failure: BaseException | None = None

        def listen_error(self, failure: Any) -> None:
            self.listen_failure = failure.value
            self.stop()

    return ListeningServer


_LISTEN_HINTS = {
    errno.EADDRINUSE: "another program listens there: stop it or choose another --port",
    errno.EADDRNOTAVAIL: "no interface of this machine has that address: see --host",
    errno.EACCES: "ports below 1024 need privileges: choose another --port",
}


def _listen_failure(interface: str, port: int, exc: BaseException) -> str:
    """The one line for a listen failure: ``cannot listen on HOST:PORT: <reason> (<what to do>)``.

    ``exc`` is Twisted's ``CannotListenError`` (its ``socketError`` the ``OSError``) or whatever
    else an endpoint failed with."""
    where = f"[{interface}]:{port}" if ":" in interface else f"{interface}:{port}"
    cause = getattr(exc, "socketError", None) or exc
    reason = getattr(cause, "strerror", None) or str(cause) or type(cause).__name__
    reason = reason[:1].lower() + reason[1:]
    hint = _LISTEN_HINTS.get(getattr(cause, "errno", None))
    return f"cannot listen on {where}: {reason}" + (f" ({hint})" if hint else "")
