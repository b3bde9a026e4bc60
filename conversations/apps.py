"""The ``conversations`` Django app: its config, and the secrets every error text is redacted of."""

from __future__ import annotations

from django.apps import AppConfig


def settings_secrets() -> tuple[str, ...]:
    """The LLM API key and Django's SECRET_KEY: redacted from every error text and log line."""
    from django.conf import settings

    return (settings.PICOBOT.llm_api_key.get_secret_value(), getattr(settings, "SECRET_KEY", "") or "")


class ConversationsConfig(AppConfig):
    """Dialogs, inbox, history, the agent worker and the cli_chat WebSocket (DESIGN §4)."""

    name = "conversations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from conversations.agent.log_safety import add_secret_source

        add_secret_source(settings_secrets)
