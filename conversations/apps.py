"""The ``conversations`` Django app: its config, and the secrets every error text is redacted of."""

from __future__ import annotations

from django.apps import AppConfig


def settings_secrets() -> tuple[str, ...]:
    """The LLM API key, the Feishu app secret and tokens, and Django's SECRET_KEY: redacted from
    every error text and log line."""
    from django.conf import settings

    picobot = settings.PICOBOT
    return (
        picobot.llm_api_key.get_secret_value(),
        picobot.feishu_app_secret.get_secret_value(),
        picobot.feishu_verification_token.get_secret_value(),
        picobot.feishu_encrypt_key.get_secret_value(),
        getattr(settings, "SECRET_KEY", "") or "",
    )


class ConversationsConfig(AppConfig):
    """Dialogs, inbox, history, the agent worker and the cli_chat WebSocket (DESIGN §4)."""

    name = "conversations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from conversations.agent.log_safety import add_secret_source

        add_secret_source(settings_secrets)
        from conversations.runtime import call_metrics, retry_notices
        from conversations.usage.writer import install as record_usage
        from providers import metering

        call_metrics.install()  # provider calls and retries into /metrics (issue 17)
        metering.add_retry_observer(retry_notices.observe_retry)  # a turn's chat hears of a long wait
        record_usage()  # one usage row per provider call, in every process (issue 17)
        from django.conf import settings

        if settings.PICOBOT.feishu_mode:  # the Feishu channel (``conversations.feishu.platform``)
            from conversations.feishu.platform import FeishuConfig, FeishuPlatform, install

            install(FeishuPlatform(FeishuConfig.from_settings(settings.PICOBOT)))
