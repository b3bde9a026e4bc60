"""What operators see of the presets: the admin page, ``doctor``, and serve/runagent refusing a
bad ``PICOBOT_CONFIG`` at start (issue 17)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from conversations.chat.commands import HELP_TEXT
from tests.conversations.presets.conftest import preset_table

pytestmark = [pytest.mark.django_db]

SECRET = "sk-preset-secret-0123456789"


@pytest.fixture
def two_presets(presets, monkeypatch):
    monkeypatch.setenv("PRESET_KEY_A", SECRET)
    monkeypatch.delenv("PRESET_KEY_B", raising=False)
    presets(
        'default_model = "A"\n'
        + preset_table(
            "A", "http://127.0.0.1:9/v1", api_key_env="PRESET_KEY_A", price_input=2.5, fallbacks=["B"]
        )
        + preset_table("B", "http://127.0.0.1:9/v1", api_key_env="PRESET_KEY_B", description="the backup")
    )


@pytest.fixture
def staff_client(client):
    client.force_login(get_user_model().objects.create_superuser("operator", password="pw-for-tests"))
    return client


def test_the_admin_shows_the_presets_read_only_without_keys(two_presets, staff_client):
    index = staff_client.get("/admin/").content.decode()
    assert 'href="/admin/model-presets/"' in index
    page = staff_client.get("/admin/model-presets/")
    text = page.content.decode()
    assert page.status_code == 200
    assert "A (default)" in text and "model-A" in text and "2.5" in text and "the backup" in text
    assert "$PRESET_KEY_A: set" in text and "$PRESET_KEY_B: <strong>missing</strong>" in text
    assert SECRET not in text and "<form" not in text.split('id="content-main"')[1]


def test_the_admin_page_shows_why_a_bad_file_does_not_load(presets, staff_client):
    presets("[models.a]\nprovider = 'gemini'\nmodel = 'm'\n")
    text = staff_client.get("/admin/model-presets/").content.decode()
    assert "errornote" in text and "[models.a].provider must be" in text


def test_the_admin_page_is_staff_only(two_presets, client):
    assert client.get("/admin/model-presets/").status_code == 302  # to the admin login


def doctor() -> tuple[str, CommandError | None]:
    out = StringIO()
    try:
        call_command("doctor", "--no-llm-request", stdout=out, stderr=StringIO())
    except CommandError as exc:
        return out.getvalue(), exc
    return out.getvalue(), None


def test_doctor_reports_the_file_each_key_and_the_unused_llm_settings(two_presets, monkeypatch):
    monkeypatch.setenv("PICOBOT_LLM_MODEL", "ignored-model")
    text, _ = doctor()
    assert "OK   model presets: 2 from PICOBOT_CONFIG=" in text and ": A, B; default A" in text
    assert (
        "WARN model presets: with a [models] table the PICOBOT_LLM_* provider settings are not used "
        "(set but ignored: PICOBOT_LLM_MODEL)" in text
    )
    assert "OK   preset A: A (openai model-A): $PRESET_KEY_A is set" in text
    assert "WARN preset B: B (openai model-B): $PRESET_KEY_B is not set" in text
    assert "fix: set PRESET_KEY_B in the server's environment" in text
    assert "WARN preset A fallbacks: B cannot be used (no key): A falls back to nothing" in text
    assert SECRET not in text
    # The provider check is the default preset's.
    assert "LLM provider: openai at http://127.0.0.1:9/v1, model model-A" in text


def test_doctor_fails_a_default_preset_without_its_key(presets, monkeypatch):
    monkeypatch.delenv("PRESET_KEY_A", raising=False)
    presets(preset_table("A", "http://127.0.0.1:9/v1", api_key_env="PRESET_KEY_A"))
    text, error = doctor()
    assert error is not None and "FAIL preset A" in text and "and it is the default" in text


def test_doctor_reports_a_bad_file_with_its_error(presets):
    presets("[models.a]\nprovider = 'openai'\n")
    text, error = doctor()
    assert error is not None
    assert "FAIL model presets: PICOBOT_CONFIG: [models.a].model is required for provider 'openai'" in text
    # The provider check cannot say more, and must not send the operator to PICOBOT_LLM_*.
    assert "WARN LLM provider: not checked: PICOBOT_CONFIG does not load (see model presets)" in text
    assert "PICOBOT_LLM_PROVIDER" not in text


def test_doctors_provider_fixes_name_the_presets_table_not_the_unused_llm_settings(presets, monkeypatch):
    monkeypatch.setenv("PRESET_KEY_A", SECRET)
    presets(preset_table("A", "http://127.0.0.1:9/v1", api_key_env="PRESET_KEY_A"))
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("doctor", stdout=out, stderr=StringIO())  # probes port 9: nothing listens
    text = out.getvalue()
    assert "FAIL LLM provider: openai at http://127.0.0.1:9/v1, model model-A" in text
    assert (
        "[models.A].base_url in PICOBOT_CONFIG" in text
        and "PICOBOT_LLM_" not in text.split("LLM provider")[-1]
    )


def test_doctor_without_a_file_says_the_llm_settings_are_the_default_preset():
    text, _ = doctor()
    assert (
        "OK   model presets: no PICOBOT_CONFIG: the PICOBOT_LLM_* settings are the preset 'default'" in text
    )


@pytest.mark.parametrize("command", ["runagent", "serve"])
@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[models.a\n", "not valid TOML"),
        (
            '[models.a]\nprovider = "openai"\nmodel = "m"\nfallbacks = ["b"]\n',
            "[models.a].fallbacks: no preset 'b'",
        ),
    ],
)
def test_serve_and_runagent_refuse_a_bad_config_file_at_start(presets, command, text, said):
    presets(text)
    with pytest.raises(CommandError) as raised:
        call_command(command, stdout=StringIO(), stderr=StringIO())
    # The file holds more than the presets ([mcp_servers]): the message names it, not "LLM".
    assert str(raised.value).startswith("PICOBOT_CONFIG") and said in str(raised.value)


def test_a_missing_config_file_is_refused_naming_it(settings, tmp_path):
    from conversations.runtime.provider import reset

    settings.PICOBOT = settings.PICOBOT.replace(config=tmp_path / "absent.toml")
    reset()
    try:
        with pytest.raises(CommandError, match="absent.toml: cannot read it"):
            call_command("runagent", stdout=StringIO(), stderr=StringIO())
    finally:
        reset()


def test_help_lists_model():
    assert "/model [name] — list the model presets, or switch this dialog to one" in HELP_TEXT
