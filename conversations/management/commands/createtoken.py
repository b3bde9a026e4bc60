"""``manage.py createtoken USERNAME``: create the user if needed and print a new API token.

The username is normalised as Django's login form and ``createsuperuser`` do (the user model's
``normalize_username``: Unicode NFKC, so ``ｆｕｌｌ`` becomes ``full``) before it is checked and
looked up; a changed name is said on standard error. Otherwise the user would be stored under a
name the WebUI login can never match.

``--expires DAYS`` makes a token that is dead everywhere after that many days (issue 16);
``--rotate`` first revokes the user's live tokens (only those named ``--name`` when one is
given) and lists them, then prints the new one.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from conversations.auth import create_token, get_or_create_user
from conversations.management.commands._common import PicoBotCommand
from conversations.models import ApiToken, now_ms
from conversations.transfer.markdown import ms_to_text
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


MAX_EXPIRY_DAYS = 36_500  # a hundred years: past it, say "never" (no --expires)


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
            "--expires",
            type=float,
            metavar="DAYS",
            help="the token stops working after this many days (e.g. 90; fractions allowed); default: never",
        )
        parser.add_argument(
            "--rotate",
            action="store_true",
            help="revoke the user's live tokens first (with --name: only the tokens of that name), then print "
            "a new one",
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
        self,
        *args: object,
        username: str,
        name: str,
        save: bool,
        url: str,
        expires: float | None = None,
        rotate: bool = False,
        **options: object,
    ) -> None:
        if expires is not None and not (0 < expires <= MAX_EXPIRY_DAYS):
            raise CommandError(f"--expires must be a number of days above 0 and at most {MAX_EXPIRY_DAYS}")
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
        if rotate:
            self._revoke_old(user, name)
        expires_at = None if expires is None else now_ms() + round(expires * 86_400_000)
        token = create_token(user, name=name, expires_at=expires_at)
        if expires_at is not None:
            self.stderr.write(f"It expires {ms_to_text(expires_at)}.")
        self.stderr.write("New API token (shown once):")
        self.stdout.write(token)
        if save:
            try:
                path = save_credentials(url, username, token)
            except OSError as exc:
                raise CommandError(f"the token above was not saved: {exc} (pass it with --token)") from None
            self.stderr.write(f"Saved with {url} for 'manage.py chat' in {path} (mode 0600).")

    def _revoke_old(self, user: object, name: str) -> None:
        """Revoke ``user``'s live tokens (those named ``name`` when given) and list them on stderr."""
        rows = ApiToken.objects.filter(user=user, revoked_at__isnull=True)
        if name:
            rows = rows.filter(name=name)
        old = list(rows.order_by("id"))
        ApiToken.objects.filter(pk__in=[t.pk for t in old]).update(revoked_at=now_ms())
        for t in old:
            label = f" {t.name!r}" if t.name else ""
            self.stderr.write(f"Revoked #{t.pk} {t.prefix}…{label}.")
        if not old:
            self.stderr.write("No live token to revoke" + (f" named {name!r}." if name else "."))
