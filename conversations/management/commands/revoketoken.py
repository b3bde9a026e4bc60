"""``manage.py revoketoken``: revoke API tokens by prefix or id, or all of a user's (DESIGN §9).

A revoked token stops working at once for new WebSocket connections and REST calls (every request
checks it); a WebUI session logged in with it is logged out on its next request, and open
WebSockets using it are closed by their server within ``conversations.auth.websocket.REVOCATION_CHECK_SECONDS``
(each server checks the tokens of its open sockets: nothing needs to reach it from here). The row
stays (prefix, dates) for the record.
"""

from __future__ import annotations

from django.core.management.base import CommandError, CommandParser
from django.db.models import QuerySet

from conversations.management.commands._common import PicoBotCommand, find_user, is_ascii_number
from conversations.models import ApiToken, now_ms
from conversations.transfer.markdown import ms_to_text

MAX_ID = 2**63 - 1  # BigAutoField (settings.DEFAULT_AUTO_FIELD) on every supported database


class Command(PicoBotCommand):
    help = (
        "Revoke API tokens: one by its prefix (as listed by the admin, e.g. pb_Ab3xY), its id or the "
        "whole token, or every token of a user with --user USERNAME --all. Lists what was revoked."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("token", nargs="?", help="the token's prefix, id, or the whole token")
        parser.add_argument("--user", help="only tokens of this user (with --all: every one of them)")
        parser.add_argument("--all", action="store_true", help="with --user: revoke all of the user's tokens")

    def handle(
        self, *args: object, token: str | None, user: str | None, all: bool, **options: object
    ) -> None:
        rows = ApiToken.objects.select_related("user")
        if user is not None:
            owner = find_user(user)
            if owner is None:
                raise CommandError(f"no user {user!r}")
            rows = rows.filter(user=owner)
        if all:
            if token is not None or user is None:
                raise CommandError(
                    "--all revokes every token of one user: use --user USERNAME --all (no token)"
                )
        elif token is None:
            raise CommandError("name a token (prefix, id or the token itself), or use --user USERNAME --all")
        else:
            rows = self._match(rows, token)
        live = list(rows.filter(revoked_at__isnull=True).order_by("id"))
        already = rows.filter(revoked_at__isnull=False).count()
        if not live:
            if already:
                self.stdout.write(f"Nothing to revoke: {already} matching token(s) were already revoked.")
                return
            raise CommandError("no matching token" + (f" for user {user!r}" if user else ""))
        now = now_ms()
        ApiToken.objects.filter(pk__in=[t.pk for t in live]).update(revoked_at=now)
        for t in live:
            label = f" {t.name!r}" if t.name else ""
            self.stdout.write(
                f"Revoked #{t.pk} {t.prefix}…{label} of {t.user.get_username()} "
                f"(created {ms_to_text(t.created_at)}, last used {ms_to_text(t.last_used_at)})"
            )
        note = f"; {already} were already revoked" if already else ""
        self.stdout.write(f"{len(live)} token(s) revoked{note}.")

    def _match(self, rows: QuerySet, token: str) -> QuerySet:
        """The tokens ``token`` names: an id (ASCII digits within the id column's range), else the
        whole token (over 16 characters, by its hash), else a prefix. Raises CommandError when a
        prefix matches more than one live token."""
        token = token.strip().rstrip("…")
        # "²".isdigit() is True and int("²") raises; an id past the column's range fails in SQL;
        # int() refuses more than 4 300 digits: the length is checked first.
        if is_ascii_number(token) and len(token) <= len(str(MAX_ID)) and int(token) <= MAX_ID:
            matched = rows.filter(pk=int(token))
            if matched.exists():
                return matched
        if len(token) > 16:  # the whole token: match its hash
            return rows.filter(token_hash=ApiToken.hash_token(token))
        matched = rows.filter(prefix=token)
        live = [t for t in matched if t.revoked_at is None]
        if len(live) > 1:
            listing = ", ".join(
                f"#{t.pk} ({t.user.get_username()}{' ' + repr(t.name) if t.name else ''})" for t in live
            )
            raise CommandError(
                f"{len(live)} tokens have the prefix {token!r}: {listing}. Revoke by id instead."
            )
        return matched
