"""``manage.py createtoken USERNAME``: create the user if needed and print a new API token.

The username is normalised as Django's login form and ``createsuperuser`` do (the user model's
``normalize_username``: Unicode NFKC, so ``ｆｕｌｌ`` becomes ``full``) before it is checked and
looked up; a changed name is said on standard error. Otherwise the user would be stored under a
name the WebUI login can never match.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from conversations.auth import create_token, get_or_create_user
from conversations.management.commands._common import PicoBotCommand
from conversations.models import ApiToken
from tui.config import DEFAULT_URL, ConfigError, chat_url, credentials_path, save_credentials


def check_username(username: str) -> str:
    """The username as Django stores it (``normalize_username``, NFKC); raises CommandError unless
    it is one Django's own forms would accept: the user model's validators (letters, digits and
    ``@.+-_``) and maximum length. Nothing is stripped silently: leading or trailing spaces are
    refused, not trimmed."""
    if username != username.strip():
        raise CommandError(f"the username {username!r} has leading or trailing spaces")
    model = get_user_model()
    normalised = model.normalize_username(username)
    field = model._meta.get_field(model.USERNAME_FIELD)
    try:
        field.clean(normalised, None)
    except ValidationError as exc:
        raise CommandError(f"invalid username {username!r}: {' '.join(exc.messages)}") from None
    return normalised


class Command(PicoBotCommand):
    help = (
        "Create an API token for USERNAME (creating the user if needed) and print it as the last "
        "line. The token is shown once; use it as 'Authorization: Bearer <token>', '?token=<token>', "
        "or as the password on the WebUI login page. With --save it is also written, with the username and the "
        "server URL, to $XDG_CONFIG_HOME/picobot/credentials.json (~/.config/picobot/, mode 0600), where "
        "'manage.py chat' finds it. USERNAME: up to 150 letters, digits and @.+-_ "
        "(as Django's admin accepts), normalised as Django's login form does (NFKC: ｆｕｌｌ is full)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--name", default="", help="a label for the token (e.g. 'laptop TUI'), up to 100 characters"
        )
        parser.add_argument(
            "--save",
            action="store_true",
            help=f"also save the URL, username and token for 'manage.py chat' ({credentials_path()}, mode 0600)",
        )
        parser.add_argument(
            "--url", default=DEFAULT_URL, help=f"the server URL saved with --save (default {DEFAULT_URL})"
        )

    def handle(
        self, *args: object, username: str, name: str, save: bool, url: str, **options: object
    ) -> None:
        if save:
            try:
                chat_url(url)
            except ConfigError as exc:
                raise CommandError(f"--url: {exc}") from None
        normalised = check_username(username)
        if normalised != username:
            self.stderr.write(f"Username normalised to {normalised!r} (as the login form does).")
            username = normalised
        limit = ApiToken._meta.get_field("name").max_length
        if len(name) > limit or not name.isprintable():
            raise CommandError(f"--name must be printable text of at most {limit} characters")
        user, created = get_or_create_user(username)
        if created:
            self.stderr.write(f"Created user {username!r}.")
        token = create_token(user, name=name)
        self.stderr.write("New API token (shown once):")
        self.stdout.write(token)
        if save:
            try:
                path = save_credentials(url, username, token)
            except OSError as exc:
                raise CommandError(f"the token above was not saved: {exc} (pass it with --token)") from None
            self.stderr.write(f"Saved with {url} for 'manage.py chat' in {path} (mode 0600).")
