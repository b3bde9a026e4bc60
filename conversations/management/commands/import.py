"""``manage.py import FILE``: read a JSON export back, exactly (``conversations.transfer``).

The file is read as standard JSON only (``transfer.strict_json``), validated whole against the
format (``transfer.schema``; the rules: ``conversations/transfer/README.md``) and imported in one
transaction (``transfer.importer``): a bad file or an id clash imports nothing, and the one error
line says where (``nothing imported: dialogs[0].messages[3].seq …``). The module is named
``import`` for the command's sake; Django's loader imports it by path.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DataError, IntegrityError

from conversations.management.commands._common import PicoBotCommand, find_user
from conversations.transfer.errors import TransferError
from conversations.transfer.importer import ImportedDialog, import_document
from conversations.transfer.strict_json import loads_strict, read_document


class Command(PicoBotCommand):
    help = (
        "Import dialogs from a JSON file written by 'manage.py export' (FILE, or - for standard input). "
        "Everything or nothing is imported. An existing dialog id is an error unless --as-new (new "
        "dialog and message ids). Owners are matched by username; --user USERNAME gives every dialog "
        "to that user (required for cli_chat dialogs without an owner). Unknown fields are refused. "
        "Prints the imported dialog ids."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE", help="the export's JSON file, or - for standard input")
        parser.add_argument("--user", metavar="USERNAME", help="owner of every imported dialog (must exist)")
        parser.add_argument(
            "--as-new", action="store_true", help="import as copies with new dialog and message ids"
        )

    def handle(self, *args: object, file: str, user: str | None, as_new: bool, **options: Any) -> None:
        owner = None
        if user is not None and not user.strip():
            raise CommandError("--user needs a username")
        if user is not None:
            owner = find_user(user)
            if owner is None:
                raise CommandError(f"no user {user!r} (create it with: manage.py createtoken {user!r})")
        try:
            if file == "-":
                doc = loads_strict(read_document(sys.stdin))
            else:
                with open(file, encoding="utf-8") as f:
                    doc = loads_strict(read_document(f))
        except UnicodeDecodeError as exc:
            raise CommandError(f"nothing imported: {file} is not UTF-8 text ({exc.reason})") from exc
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror or exc}") from exc
        except TransferError as exc:
            raise CommandError(f"nothing imported: {file} {exc}") from exc

        imported: list[str] = []  # told once the transaction committed: a later refusal imports nothing

        def progress(item: ImportedDialog) -> None:
            moved = f" (was {item.source_id})" if item.source_id != item.id else ""
            imported.append(f"  imported {item.id}{moved}: {item.messages} message(s)")

        try:
            done = import_document(doc, user=owner, as_new=as_new, progress=progress)
        except TransferError as exc:
            raise CommandError(f"nothing imported: {exc}") from exc
        except RecursionError:  # validation bounds nesting; this is a last line of defence
            raise CommandError("nothing imported: the document nests too deeply") from None
        except (DataError, IntegrityError) as exc:  # validation should refuse first: a last line of defence
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CommandError(f"nothing imported: the database refused a value: {first_line[:300]}") from exc
        if options.get("verbosity", 1) >= 1:
            for line in imported:
                self.stderr.write(line)
        for item in done:
            self.stdout.write(item.id)
        self.stderr.write(f"Imported {len(done)} dialog(s), {sum(i.messages for i in done)} message(s).")
