"""``manage.py export``: dialogs as a versioned JSON document or a Markdown transcript.

The JSON form (``conversations.transfer.schema``: ``{format: "picobot-export", version: 1, dialogs:
[...]}``) holds every history column, ``provider_state`` and media included, and is what
``manage.py import`` reads back exactly. Markdown is for people (reasoning in ``<details>``, tool
calls as code blocks).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser, OutputWrapper

from conversations.management.commands._common import PicoBotCommand, find_user
from conversations.transfer.errors import TransferError
from conversations.transfer.export import select_dialogs, write_json, write_markdown


class Command(PicoBotCommand):
    help = (
        "Export dialogs — one (--dialog SESSION_ID, repeatable), a chat's (--chat CHANNEL:CHAT_ID) or a "
        "user's (--user USERNAME) — as JSON (for 'manage.py import'; holds provider state and media: "
        "keep it private) or as a Markdown transcript, to --output FILE or standard output."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--dialog", action="append", metavar="SESSION_ID", help="a dialog's unified id")
        which.add_argument(
            "--chat", metavar="CHANNEL:CHAT_ID", help="every dialog of a chat, e.g. cli_chat:1"
        )
        which.add_argument("--user", metavar="USERNAME", help="every dialog the user owns")
        parser.add_argument("--format", choices=["json", "markdown"], default="json", help="default json")
        parser.add_argument("--output", "-o", metavar="FILE", help="write here instead of standard output")
        parser.add_argument(
            "--include-deleted",
            action="store_true",
            help="with --chat/--user: also soft-deleted dialogs (a --dialog is exported either way)",
        )

    def handle(self, *args: object, **options: Any) -> None:
        username = options["user"]
        if username is not None and (user := find_user(username)) is not None:
            username = user.get_username()  # ｆｕｌｌ finds full, as the login form would
        try:
            dialogs = select_dialogs(
                dialog_ids=options["dialog"] or (),
                chat=options["chat"],
                username=username,
                include_deleted=options["include_deleted"],
            )
        except TransferError as exc:
            raise CommandError(str(exc)) from exc
        total = dialogs.count()
        writer = write_json if options["format"] == "json" else write_markdown
        done = 0

        def progress(item: dict) -> None:
            nonlocal done
            done += 1
            if options.get("verbosity", 1) >= 1:
                self.stderr.write(
                    f"  exported {done}/{total}: {item['id']} ({len(item['messages'])} messages)"
                )

        output = options["output"]
        if output:
            path = Path(output)
            try:
                with path.open("w", encoding="utf-8") as out:
                    count, messages = writer(dialogs, out, progress)
            except OSError as exc:
                raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from exc
            self.stderr.write(f"Exported {count} dialog(s), {messages} message(s) to {path}.")
        else:
            try:
                count, messages = writer(dialogs, _Raw(self.stdout), progress)
                self.stdout.flush()
            except BrokenPipeError:  # `export | head`: the reader left; stop quietly, as cat does
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise SystemExit(1) from None
            self.stderr.write(f"Exported {count} dialog(s), {messages} message(s).")


class _Raw:
    """A text stream over the command's stdout that adds no line endings (written as is)."""

    def __init__(self, wrapper: OutputWrapper) -> None:
        self._wrapper = wrapper

    def write(self, text: str) -> None:
        self._wrapper.write(text, ending="")
