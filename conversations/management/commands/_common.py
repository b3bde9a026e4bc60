"""What every PicoBot management command shares (not a command: Django skips ``_`` modules).

:class:`PicoBotCommand` turns the database errors an operator meets before anything works — a
database that was never migrated, or one that cannot be reached — into one line and exit code 1
(``CommandError``) instead of a traceback.

Exit codes of every command (README, "Operator commands"): 0 done, 1 bad input or a failure
(``CommandError``: the message says what to do), 2 a usage error (an unknown option, a missing
argument: ``argparse``'s convention, with the usage line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import OperationalError, ProgrammingError

from picobot_site.config_rules import one_line

NOT_SET_UP = "the database is not set up: run manage.py migrate"

_MISSING_TABLE_MARKS = (
    "no such table",
    "no such column",
    "does not exist",
    "undefinedtable",
    "undefinedcolumn",
)


def is_missing_table(exc: BaseException) -> bool:
    """True for the error of a query on a table (or column) that migrations did not create yet:
    SQLite's "no such table", PostgreSQL's "relation … does not exist"."""
    text = f"{type(exc).__name__} {exc} {type(exc.__cause__).__name__ if exc.__cause__ else ''}".lower()
    if 'database "' in text and "does not exist" in text:
        return False  # PostgreSQL: the database itself is missing (a connection error)
    return any(mark in text for mark in _MISSING_TABLE_MARKS)


def database_error(exc: OperationalError | ProgrammingError) -> CommandError:
    """The ``CommandError`` an operator sees for a database error: migrate, or check the URL."""
    if is_missing_table(exc):
        return CommandError(NOT_SET_UP)
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return CommandError(
        f"the database failed: {first_line[:300]} (check PICOBOT_DATABASE_URL and that the database "
        "server runs; 'manage.py doctor' checks it)"
    )


def bounded_int(low: int, high: int, hint: str = "") -> Callable[[str], int]:
    """An ``argparse`` ``type`` for a whole number from ``low`` to ``high`` written in ASCII digits.

    ``int()`` alone takes other scripts' digits (``int("٣") == 3``) and any size, and a value no
    column or socket can hold then fails later with a traceback; this refuses them up front as a
    usage error (exit 2 from the command line, ``CommandError`` from ``call_command``), naming the
    range and ``hint`` (e.g. ``" (0 picks a free one)"``).
    """

    def parse(text: str) -> int:
        if text.isascii() and text.isdecimal() and low <= int(text) <= high:
            return int(text)
        raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high}{hint}, got {text!r}")

    parse.__name__ = "whole number"  # argparse names the type by it in some messages
    return parse


def is_ascii_number(text: str) -> bool:
    """True for text of ASCII digits only: ``"²".isdigit()`` and ``"٣".isdecimal()`` are True too,
    but an id typed by an operator is ASCII (and ``int("²")`` raises)."""
    return text.isascii() and text.isdecimal()


def find_user(username: str) -> Any:
    """The user named ``username``, or None. Exactly that name first, else the name as Django's
    login form normalises it (``normalize_username``: NFKC, so ``ｆｕｌｌ`` finds ``full``). Touches
    the DB."""
    model = get_user_model()
    found = model.objects.filter(**{model.USERNAME_FIELD: username}).first()
    if found is None:
        normalised = model.normalize_username(username)
        if normalised != username:
            found = model.objects.filter(**{model.USERNAME_FIELD: normalised}).first()
    return found


def require_database() -> None:
    """One cheap query on PicoBot's tables: raises the operator's ``CommandError`` when the
    database is unreachable or not migrated (for commands that would otherwise only log it)."""
    from conversations.models import Dialog

    try:
        Dialog.objects.exists()
    except (OperationalError, ProgrammingError) as exc:
        raise database_error(exc) from exc


def provider_config_error(exc: ValueError) -> CommandError:
    """The operator's error for a provider that cannot be built: a ``PICOBOT_CONFIG`` file that
    cannot be read or parsed names the file itself (it holds more than the LLM presets, e.g.
    ``[mcp_servers]``); any other mistake is labelled ``LLM configuration``."""
    text = str(exc)
    return CommandError(text if text.startswith("PICOBOT_CONFIG") else f"LLM configuration: {text}")


def apply_switch_interval() -> float:
    """Set the interpreter's thread switch interval from ``PICOBOT_SWITCH_INTERVAL_MS`` (serve and
    runagent: an event loop beside storage threads). Returns the interval in force, seconds."""
    interval_ms = settings.PICOBOT.switch_interval_ms
    if interval_ms > 0:
        sys.setswitchinterval(interval_ms / 1000)
    return sys.getswitchinterval()


class PicoBotCommand(BaseCommand):
    """``BaseCommand`` whose database errors end as one line (exit 1), never a traceback."""

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except CommandError as exc:  # one line, whatever text it quotes (a plugin's error, a path)
            if "\n" not in str(exc) and "\r" not in str(exc):
                raise
            raise CommandError(one_line(str(exc)), returncode=exc.returncode) from exc
        except OperationalError as exc:
            raise database_error(exc) from exc
        except ProgrammingError as exc:
            if not is_missing_table(exc):
                raise  # a bug, not the operator's setup: keep its traceback
            raise CommandError(NOT_SET_UP) from exc


LAYER_CHECK_SECONDS = 10.0
"""How long ``serve`` and ``runagent`` wait for a message to come back through the channel layer
at start."""


async def layer_round_trip(layer: object) -> None:
    """Send a message to a fresh channel of the layer and receive it back (raises when it cannot)."""
    channel = await layer.new_channel("picobot.serve.start")
    await layer.send(channel, {"type": "serve.ping"})
    await layer.receive(channel)


def start_failure(exc: BaseException) -> str:
    """Why the worker could not start, for the operator: the exception itself and what to check."""
    # repr() alone can be empty or odd (redis-py's is "network:ConnectionError"): name and text.
    reason = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}" if str(exc) else repr(exc)
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) and str(cause) not in reason:
        reason = f"{reason} ({type(cause).__name__}: {cause})"
    if isinstance(exc, TimeoutError):
        reason = f"{reason}: the channel layer did not answer within {LAYER_CHECK_SECONDS:g} s"
    if getattr(settings, "REDIS_URL", ""):
        return f"{reason}; check PICOBOT_REDIS_URL (is Redis running and reachable from here?)"
    return f"{reason}; see the log above"
