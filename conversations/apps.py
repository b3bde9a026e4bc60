from __future__ import annotations

from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    """Dialogs, inbox, history, the agent worker and the cli_chat WebSocket (DESIGN §4)."""

    name = "conversations"
    default_auto_field = "django.db.models.BigAutoField"
