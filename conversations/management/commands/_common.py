"""What every PicoBot management command shares (not a command: Django skips ``_`` modules).

:class:`PicoBotCommand` turns the database errors an operator meets before anything works — a
database that was never migrated, or one that cannot be reached — into one line and exit code 1
(``CommandError``) instead of a traceback.

Exit codes of every command (README, "Operator commands"): 0 done, 1 bad input or a failure
(``CommandError``: the message says what to do), 2 a usage error (an unknown option, a missing
argument: ``argparse``'s convention, with the usage line).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import OperationalError, ProgrammingError

NOT_SET_UP = "the database is not set up: run manage.py migrate"

_MISSING_TABLE_MARKS = ("no such table", "no such column", "does not exist", "undefinedtable", "undefinedcolumn")


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


def require_database() -> None:
    """One cheap query on PicoBot's tables: raises the operator's ``CommandError`` when the
    database is unreachable or not migrated (for commands that would otherwise only log it)."""
    from conversations.models import Dialog

    try:
        Dialog.objects.exists()
    except (OperationalError, ProgrammingError) as exc:
        raise database_error(exc) from exc


class PicoBotCommand(BaseCommand):
    """``BaseCommand`` whose database errors end as one line (exit 1), never a traceback."""

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except OperationalError as exc:
            raise database_error(exc) from exc
        except ProgrammingError as exc:
            if not is_missing_table(exc):
                raise  # a bug, not the operator's setup: keep its traceback
            raise CommandError(NOT_SET_UP) from exc
