"""``manage.py doctor``: check that this PicoBot can run, and say how to fix what cannot.

Checks, one line each (``OK`` / ``WARN`` / ``FAIL``):

* database: connects, every migration applied (DESIGN §2, §3);
* channel layer: a send/receive round trip on a fresh channel (Redis when ``PICOBOT_REDIS_URL``
  is set; DESIGN §2);
* model presets: the ``PICOBOT_CONFIG`` file loads, each preset's key variable is set, and
  whether the ``PICOBOT_LLM_*`` provider settings are in use (issue 17);
* LLM provider (the default preset's): the configuration builds (``providers.factory.build_provider``), and for a real
  provider one cheap authenticated request — a streamed completion of at most 1 token, no
  retries, short timeouts (DESIGN §8);
* MCP servers: the ``[mcp_servers]`` tables load; each server (file and admin) starts or
  answers and lists its tools, then stops;
* feishu: off, or the app's credentials get a tenant token and the bot info API answers;
* settings: the ``PICOBOT_*`` variables changed from their defaults (``settings.PICOBOT``, typed
  and checked at start-up), ``DEBUG`` off, ``ALLOWED_HOSTS``, the secret key, a writable data directory (DESIGN
  §8–§9).

Exits 1 (CommandError) when something FAILs. Secrets are never printed: URLs lose their
userinfo, provider errors are redacted by the provider.
"""

from __future__ import annotations

import asyncio
import math
import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

from conversations.management.commands._common import PicoBotCommand
from conversations.management.commands._doctor_check import FAIL, OK, WARN, Check, safe_url
from conversations.management.commands._doctor_feishu import check_feishu
from conversations.management.commands._doctor_mcp import check_mcp
from conversations.management.commands._doctor_presets import check_presets
from conversations.management.commands._doctor_provider import check_provider
from picobot_site.config_rules import env_name, shown_value

if TYPE_CHECKING:
    pass

_NOT_SETTINGS = ("PICOBOT_TEST_", "PICOBOT_REQUIRE_")
"""``PICOBOT_*`` variables of the test suite (README, Quick start), not settings."""
_CLIENT_VARIABLES = frozenset({"PICOBOT_URL", "PICOBOT_TOKEN"})
"""The terminal client's variables (``manage.py chat``, README "Terminal UI"), not settings."""
_PLACEHOLDER_KEYS = {
    "changeme",
    "change-me",
    "secret",
    "secret-key",
    "insecure",
    "django-insecure",
    "dev",
    "test",
}


# --- database -----------------------------------------------------------------------------------


def check_database() -> list[Check]:
    connection = connections[DEFAULT_DB_ALIAS]
    engine = connection.vendor
    where = settings.DATABASES[DEFAULT_DB_ALIAS].get("NAME", "")
    shown = (
        str(where)
        if engine == "sqlite"
        else safe_url(settings.PICOBOT.database_url.get_secret_value()) or str(where)
    )
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return [
            Check(
                FAIL,
                "database",
                f"cannot connect to {engine} at {shown}: {type(exc).__name__}: {exc}",
                "check PICOBOT_DATABASE_URL and that the database server runs and accepts this user",
            )
        ]
    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:
        return [
            Check(
                FAIL,
                "database",
                f"cannot read the migration state: {type(exc).__name__}: {exc}",
                "run 'python manage.py migrate'",
            )
        ]
    if pending:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in pending[:3])
        more = f" and {len(pending) - 3} more" if len(pending) > 3 else ""
        return [
            Check(
                FAIL,
                "database",
                f"{len(pending)} migration(s) not applied: {names}{more}",
                "run 'python manage.py migrate'",
            )
        ]
    return [Check(OK, "database", f"{engine} at {shown}, all migrations applied")]


# --- channel layer -----------------------------------------------------------------------------


async def _layer_round_trip(timeout: float) -> None:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer configured (CHANNEL_LAYERS)")
    try:
        async with asyncio.timeout(timeout):
            channel = await layer.new_channel("picobot-doctor")
            token = uuid.uuid4().hex
            await layer.send(channel, {"type": "doctor.ping", "token": token})
            message = await layer.receive(channel)
        if message.get("token") != token:
            raise RuntimeError("received a different message than was sent")
    finally:
        close = getattr(layer, "close_pools", None)
        if close is not None:
            await close()


def check_channel_layer(timeout: float) -> list[Check]:
    backend = settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND", "")
    redis_url = getattr(settings, "REDIS_URL", "")
    label = f"Redis at {safe_url(redis_url)}" if redis_url else "in-memory"
    try:
        asyncio.run(_layer_round_trip(timeout))
    except TimeoutError:
        fix = "check that Redis runs and PICOBOT_REDIS_URL points at it" if redis_url else "see the logs"
        return [Check(FAIL, "channel layer", f"{label}: no round trip within {timeout:g}s", fix)]
    except Exception as exc:
        fix = (
            "start Redis or correct PICOBOT_REDIS_URL (redis://host:6379/0)"
            if redis_url
            else "check CHANNEL_LAYERS in the settings"
        )
        detail = f"{label} ({backend}): {type(exc).__name__}: {exc}"
        password = urlsplit(redis_url).password if redis_url else None
        if password:
            detail = detail.replace(password, "***")
        return [Check(FAIL, "channel layer", detail, fix)]
    if redis_url:
        return [Check(OK, "channel layer", f"{label}: send/receive round trip works")]
    return [
        Check(
            OK,
            "channel layer",
            "in-memory (embedded mode): fine for one 'serve' process; "
            "'runagent' and several Daphne processes need PICOBOT_REDIS_URL",
        )
    ]


# --- settings ----------------------------------------------------------------------------------


def check_configuration() -> list[Check]:
    """The ``PICOBOT_*`` variables set in the environment (names only: values may be secret; they
    were checked when the settings loaded, ``picobot_site.config``), and any ``PICOBOT_*`` name
    that is no setting (a typo is otherwise silently ignored) — except the test suite's and the
    terminal client's own variables."""
    known = {env_name(name) for name in type(settings.PICOBOT).model_fields}
    ours = sorted(
        name
        for name in os.environ
        if name.startswith("PICOBOT_")
        and not name.startswith(_NOT_SETTINGS)
        and name not in _CLIENT_VARIABLES
    )
    used = [name for name in ours if name in known and os.environ[name].strip()]
    detail = f"{len(used)} PICOBOT_* variable(s) set: {', '.join(used)}" if used else "all defaults"
    out = [Check(OK, "configuration", detail)]
    unknown = [shown_value(name) for name in ours if name not in known]
    if unknown:
        out.append(
            Check(
                WARN,
                "configuration",
                f"not settings, ignored: {', '.join(unknown)}",
                "correct the name (README, Configuration) or unset it",
            )
        )
    return out


def check_tools() -> list[Check]:
    """The tool registry builds: built-ins plus ``PICOBOT_TOOL_MODULES`` (as serve builds it)."""
    from django.core.exceptions import ImproperlyConfigured

    from conversations.tools import default_registry

    try:
        registry = default_registry()
    except ImproperlyConfigured as exc:
        return [Check(FAIL, "tools", str(exc), "correct or unset PICOBOT_TOOL_MODULES")]
    names = ", ".join(sorted(definition.name for definition in registry.definitions()))
    return [Check(OK, "tools", names)]


def check_settings() -> list[Check]:
    out: list[Check] = check_configuration()
    if settings.DEBUG:
        out.append(
            Check(
                FAIL,
                "DEBUG",
                "on: error pages show stack traces and settings to anyone",
                "unset PICOBOT_DEBUG (or set it to 0) outside development",
            )
        )
    else:
        out.append(Check(OK, "DEBUG", "off"))
    hosts = list(settings.ALLOWED_HOSTS)
    if not hosts:
        out.append(
            Check(
                FAIL,
                "ALLOWED_HOSTS",
                "empty: every request is refused (400)",
                "set PICOBOT_ALLOWED_HOSTS to the names clients use, e.g. chat.example.com",
            )
        )
    elif "*" in hosts:
        out.append(
            Check(
                WARN,
                "ALLOWED_HOSTS",
                "'*' accepts any Host header (host header attacks, DNS rebinding)",
                "list the real names in PICOBOT_ALLOWED_HOSTS",
            )
        )
    else:
        local = {"localhost", "127.0.0.1", "[::1]", "testserver"}
        note = (
            " (local only: set PICOBOT_ALLOWED_HOSTS to serve other machines)" if set(hosts) <= local else ""
        )
        out.append(Check(OK, "ALLOWED_HOSTS", ", ".join(hosts) + note))
    key = str(settings.SECRET_KEY or "")
    from_env = bool(settings.PICOBOT.secret_key.get_secret_value())
    if len(key) < 32 or key.lower() in _PLACEHOLDER_KEYS or key.startswith("django-insecure"):
        out.append(
            Check(
                FAIL,
                "secret key",
                "missing, short or a well-known placeholder",
                "set PICOBOT_SECRET_KEY to a long random string (e.g. python -c 'import secrets; "
                "print(secrets.token_urlsafe(50))'), the same in every process",
            )
        )
    elif not from_env and (settings.REDIS_URL or settings.PICOBOT.database_url.get_secret_value()):
        out.append(
            Check(
                WARN,
                "secret key",
                "generated per data directory, but this looks like a scale-out setup",
                "set PICOBOT_SECRET_KEY, the same in every process, or logins break between them",
            )
        )
    else:
        source = (
            "PICOBOT_SECRET_KEY"
            if from_env
            else f"generated, kept in {Path(settings.DATA_DIR) / 'secret_key'}"
        )
        out.append(Check(OK, "secret key", f"set ({source})"))
    data_dir = Path(settings.DATA_DIR)
    try:
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".doctor-"):
            pass
    except OSError as exc:
        out.append(
            Check(
                FAIL,
                "data directory",
                f"{data_dir} is not writable: {exc.strerror or exc}",
                "make it writable for this user, or point PICOBOT_DATA_DIR elsewhere",
            )
        )
    else:
        out.append(Check(OK, "data directory", f"{data_dir} is writable"))
    return out


class Command(PicoBotCommand):
    help = (
        "Check the database (connection, migrations), the channel layer (a send/receive round trip; Redis "
        "when configured), the LLM provider (configuration, and one 1-token request) and the settings "
        "(DEBUG, ALLOWED_HOSTS, secret key, data directory). Prints OK/WARN/FAIL per check with how to "
        "fix it; exits 1 when a check FAILs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--timeout", type=float, default=15.0, help="seconds per network check (default 15)"
        )
        parser.add_argument(
            "--no-llm-request",
            action="store_true",
            help="only build the provider from the configuration; send it no request (no cost)",
        )

    def handle(self, *args: object, timeout: float, no_llm_request: bool, **options: object) -> None:
        if not math.isfinite(timeout) or timeout <= 0:  # nan and inf pass a `<= 0` test
            raise CommandError("--timeout must be a positive number of seconds")
        steps: list[tuple[str, Callable[[], list[Check]]]] = [
            ("database", check_database),
            ("channel layer", lambda: check_channel_layer(timeout)),
            ("model presets", check_presets),
            ("LLM provider", lambda: check_provider(timeout, not no_llm_request)),
            ("tools", check_tools),
            ("MCP servers", lambda: check_mcp(timeout)),
            ("feishu", lambda: check_feishu(timeout)),
            ("settings", check_settings),
        ]
        results: list[Check] = []
        for name, step in steps:
            try:
                checks = step()
            except Exception as exc:  # a check that breaks is a failed check, not a traceback
                checks = [
                    Check(
                        FAIL,
                        name,
                        f"the check itself failed: {type(exc).__name__}: {str(exc)[:200]}",
                        "a bug in the check: report it with this line",
                    )
                ]
            for check in checks:
                results.append(check)
                self.stdout.write(check.line())
                self.stdout.flush()
        failed = [c for c in results if c.status == FAIL]
        warned = sum(1 for c in results if c.status == WARN)
        summary = f"{len(results)} checks: {len(failed)} failed, {warned} warning(s)."
        if failed:
            raise CommandError(f"{summary} Failed: {', '.join(c.name for c in failed)}.")
        self.stdout.write(summary)
