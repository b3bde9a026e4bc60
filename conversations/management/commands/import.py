"""``manage.py import FILE``: read a JSON export back, exactly (issue 7; ``conversations.transfer``).

The file is validated first (format and version, no unknown fields, required fields, types,
ranges and lengths the columns hold, seq contiguity, tool calls, media as a user message carries
them, titles as the app stores them, plans by the plan tool's rules) and imported in one transaction: a bad file or an id clash imports
nothing, and says where (``nothing imported: dialogs[0].messages[3].seq …``). Unknown fields are
refused rather than dropped, and so is what the database would change or not store (NUL
characters, lone surrogates, ``NaN``/``Infinity``, a key twice in an object: ``transfer.load_json``
and ``validate_document``; a file that does not start like a JSON object, or is over 2 Gi
characters, is not read to the end), so a file is either imported exactly or not at all. The module is named
``import`` for the command's sake; Django's loader imports it by path.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DataError, IntegrityError

from conversations.management.commands._common import PicoBotCommand, find_user
from conversations.transfer import ImportedDialog, TransferError, import_document, loads_strict

MAX_DOCUMENT_CHARS = 2 * 1024**3
"""Characters of an export file read at most (2 Gi: a very large chat with images fits)."""
READ_CHARS = 16 * 1024**2


def read_document(stream: Any) -> str:
    """The text of an export from ``stream``, read in bounded pieces.

    Raises TransferError (to follow the file's name) when the text does not start like a JSON
    object (``/dev/zero``, a binary file: refused at once, not read to the end) or is longer than
    :data:`MAX_DOCUMENT_CHARS`.
    """
    head = stream.read(READ_CHARS).removeprefix("\ufeff")  # a UTF-8 byte-order mark is no content
    if not head.lstrip().startswith("{"):
        raise TransferError("is not JSON: an export is a JSON object, starting with '{'")
    parts, total = [head], len(head)
    while chunk := stream.read(READ_CHARS):
        total += len(chunk)
        if total > MAX_DOCUMENT_CHARS:
            raise TransferError(f"is larger than {MAX_DOCUMENT_CHARS} characters: not an export this command reads")
        parts.append(chunk)
    return "".join(parts)


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
        parser.add_argument("--as-new", action="store_true", help="import as copies with new dialog and message ids")

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

        def progress(item: ImportedDialog) -> None:
            if options.get("verbosity", 1) >= 1:
                moved = f" (was {item.source_id})" if item.source_id != item.id else ""
                self.stderr.write(f"  imported {item.id}{moved}: {item.messages} message(s)")

        try:
            done = import_document(doc, user=owner, as_new=as_new, progress=progress)
        except TransferError as exc:
            raise CommandError(f"nothing imported: {exc}") from exc
        except RecursionError:  # validation bounds nesting; this is a last line of defence
            raise CommandError("nothing imported: the document nests too deeply") from None
        except (DataError, IntegrityError) as exc:  # validation should refuse first: a last line of defence
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CommandError(f"nothing imported: the database refused a value: {first_line[:300]}") from exc
        for item in done:
            self.stdout.write(item.id)
        self.stderr.write(f"Imported {len(done)} dialog(s), {sum(i.messages for i in done)} message(s).")
