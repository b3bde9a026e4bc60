"""``manage.py chat``: the terminal UI (``tui``), a WebSocket client of a running PicoBot.

Thin glue: resolve the URL and token (``tui.config.resolve``: flags > ``PICOBOT_URL`` /
``PICOBOT_TOKEN`` > the file ``createtoken --save`` writes) and run ``tui.app.ChatApp``. It needs
no database: it talks to the server only over the WebSocket.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tui.config import DEFAULT_URL, ConfigError, credentials_path, resolve


class Command(BaseCommand):
    help = (
        "Chat in the terminal with a running PicoBot server over its WebSocket (ws:// or wss://). "
        f"URL: --url, else PICOBOT_URL, else the saved file, else {DEFAULT_URL}. Token: --token, else "
        "PICOBOT_TOKEN, else the token saved by 'createtoken USERNAME --save' "
        f"({credentials_path()}). Keys: Enter sends, Esc or Ctrl+C stops the running turn (Ctrl+C "
        "twice quits), F2 lists your dialogs, '/' offers the slash commands (Tab completes)."
    )
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", help=f"server URL, ws://host:port or wss://host (default {DEFAULT_URL})")
        parser.add_argument("--token", help="API token (from 'manage.py createtoken USERNAME')")

    def handle(self, *args: object, url: str | None, token: str | None, **options: object) -> None:
        from tui.app import ChatApp  # Textual loads only for this command

        try:
            config = resolve(url, token)
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        ChatApp(config.url, config.token).run()
