"""``manage.py createtoken USERNAME``: create the user if needed and print a new API token."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from conversations.auth import create_token, get_or_create_user
from conversations.management.commands._common import PicoBotCommand
from conversations.models import ApiToken


def check_username(username: str) -> None:
    """Raise CommandError unless ``username`` is one Django's own forms would accept: the user
    model's validators (letters, digits and ``@.+-_``) and maximum length. Nothing is stripped
    silently: leading or trailing spaces are refused, not trimmed."""
    if username != username.strip():
        raise CommandError(f"the username {username!r} has leading or trailing spaces")
    model = get_user_model()
    field = model._meta.get_field(model.USERNAME_FIELD)
    try:
        field.clean(username, None)
    except ValidationError as exc:
        raise CommandError(f"invalid username {username!r}: {' '.join(exc.messages)}") from None


class Command(PicoBotCommand):
    help = (
        "Create an API token for USERNAME (creating the user if needed) and print it as the last "
        "line. The token is shown once; use it as 'Authorization: Bearer <token>', '?token=<token>', "
        "or as the password on the WebUI login page. USERNAME: up to 150 letters, digits and @.+-_ "
        "(as Django's admin accepts)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label for the token (e.g. 'laptop TUI'), up to 100 characters")

    def handle(self, *args: object, username: str, name: str, **options: object) -> None:
        check_username(username)
        limit = ApiToken._meta.get_field("name").max_length
        if len(name) > limit or not name.isprintable():
            raise CommandError(f"--name must be printable text of at most {limit} characters")
        user, created = get_or_create_user(username)
        if created:
            self.stderr.write(f"Created user {username!r}.")
        token = create_token(user, name=name)
        self.stderr.write("New API token (shown once):")
        self.stdout.write(token)
