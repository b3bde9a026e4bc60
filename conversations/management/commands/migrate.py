"""``manage.py migrate``: Django's own, except that a database it cannot reach ends as one line
(``CommandError``, exit 1, naming ``PICOBOT_DATABASE_URL``) instead of a traceback;
``scripts/serve.sh`` runs it first."""

from __future__ import annotations

from typing import Any

from django.core.management.commands.migrate import Command as DjangoMigrateCommand
from django.db import OperationalError

from conversations.management.commands._common import database_error


class Command(DjangoMigrateCommand):
    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except OperationalError as exc:
            raise database_error(exc) from exc
