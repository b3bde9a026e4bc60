"""``manage.py createtoken USERNAME``: create the user if needed and print a new API token."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from conversations.auth import create_token, get_or_create_user


class Command(BaseCommand):
    help = (
        "Create an API token for USERNAME (creating the user if needed) and print it as the last "
        "line. The token is shown once; use it as 'Authorization: Bearer <token>', '?token=<token>', "
        "or as the password on the WebUI login page."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label for the token (e.g. 'laptop TUI')")

    def handle(self, *args: object, username: str, name: str, **options: object) -> None:
        user, created = get_or_create_user(username)
        if created:
            self.stderr.write(f"Created user {username!r}.")
        token = create_token(user, name=name)
        self.stderr.write("New API token (shown once):")
        self.stdout.write(token)
