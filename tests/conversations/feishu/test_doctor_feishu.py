"""``manage.py doctor``'s feishu line and the Feishu settings' consistency checks."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from picobot_site.config import PicoBotSettings
from tests.conversations.feishu.fake_server import APP_ID, APP_SECRET
from tests.conversations.management.test_doctor import doctor, line

pytestmark = [pytest.mark.django_db]


def use_feishu(settings, server_url: str, secret: str = APP_SECRET) -> None:
    settings.PICOBOT = settings.PICOBOT.replace(
        feishu_mode="webhook",
        feishu_app_id=APP_ID,
        feishu_app_secret=SecretStr(secret),
        feishu_verification_token=SecretStr("vt"),
        feishu_api_base=server_url,
    )


def test_feishu_off_is_said(settings):
    text, _ = doctor("--no-llm-request")
    assert line(text, "feishu").startswith("OK   feishu: off")


def test_working_credentials_name_the_bot_and_the_mode(settings, feishu_server):
    use_feishu(settings, feishu_server.url)
    settings.PICOBOT = settings.PICOBOT.replace(allowed_hosts=["bot.example.com", "localhost"])
    text, _ = doctor("--no-llm-request")
    found = line(text, "feishu")
    assert found.startswith("OK   feishu: webhook: bot “PicoBot” (ou_bot)") and "/feishu/events/" in found


def test_a_webhook_on_a_server_that_answers_only_local_names_is_a_warning(settings, feishu_server):
    use_feishu(settings, feishu_server.url)
    text, _ = doctor("--no-llm-request")
    found = line(text, "feishu")
    assert found.startswith("WARN feishu:") and "PICOBOT_ALLOWED_HOSTS" in found


def test_a_refused_secret_fails_with_a_hint_and_never_shows_the_secret(settings, feishu_server):
    use_feishu(settings, feishu_server.url, secret="wrong-secret-xyz")
    text, error = doctor("--no-llm-request")
    found = line(text, "feishu")
    assert error is not None and found.startswith("FAIL feishu:") and "code 10014" in found
    assert "PICOBOT_FEISHU_APP_SECRET" in found and "wrong-secret-xyz" not in text


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"PICOBOT_FEISHU_MODE": "webhook"}, "needs PICOBOT_FEISHU_APP_ID and PICOBOT_FEISHU_APP_SECRET"),
        (
            {
                "PICOBOT_FEISHU_MODE": "webhook",
                "PICOBOT_FEISHU_APP_ID": "cli_1",
                "PICOBOT_FEISHU_APP_SECRET": "s",
            },
            "needs PICOBOT_FEISHU_VERIFICATION_TOKEN",
        ),
        ({"PICOBOT_FEISHU_MODE": "push"}, "PICOBOT_FEISHU_MODE"),
        ({"PICOBOT_FEISHU_STREAMING": "sometimes"}, "PICOBOT_FEISHU_STREAMING"),
    ],
)
def test_inconsistent_feishu_settings_are_refused_at_start_up(monkeypatch, env, said):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as info:
        PicoBotSettings()
    assert said in str(info.value) or said.lower() in str(info.value).lower()


def test_long_connection_mode_needs_no_verification_token(monkeypatch):
    monkeypatch.setenv("PICOBOT_FEISHU_MODE", "Long_Connection")
    monkeypatch.setenv("PICOBOT_FEISHU_APP_ID", "cli_1")
    monkeypatch.setenv("PICOBOT_FEISHU_APP_SECRET", "s")
    assert PicoBotSettings().feishu_mode == "long_connection"
