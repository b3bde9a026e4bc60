"""The typed settings (picobot_site/config.py): types, bounds, one-line errors, the README table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from picobot_site.config import (
    ConfigError,
    PicoBotSettings,
    env_name,
    load_settings,
)
from picobot_site.config_table import settings_table, with_settings_table

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS`` in a fresh process whose only ``PICOBOT_*`` variables are ``variables``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")} | variables
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def env(monkeypatch):
    """A clean PICOBOT_* environment; returns a setter."""
    for name in list(os.environ):
        if (
            name.startswith("PICOBOT_")
            and name.removeprefix("PICOBOT_").lower() in PicoBotSettings.model_fields
        ):
            monkeypatch.delenv(name)

    def set_(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_


@pytest.mark.parametrize(
    ("name", "raw", "said"),
    [
        ("PICOBOT_LLM_IDLE_TIMEOUT", "nan", "finite number"),
        ("PICOBOT_LLM_IDLE_TIMEOUT", "inf", "finite number"),
        ("PICOBOT_TURN_TIMEOUT", "-infinity", "finite number"),
        ("PICOBOT_INBOX_CAPACITY", "-1", "greater than or equal to 1"),
        ("PICOBOT_INBOX_CAPACITY", "lots", "valid integer"),
        ("PICOBOT_LLM_PROVIDER", "bogus", "'openai', 'anthropic' or 'replay'"),
        ("PICOBOT_DEBUG", "maybe", "valid boolean"),
        ("PICOBOT_COMPACT_THRESHOLD", "1.5", "less than or equal to 1"),
        ("PICOBOT_LLM_CONNECT_TIMEOUT", "0", "greater than 0"),
        ("PICOBOT_STORAGE_RETRY_DELAYS_MS", "100,x", "valid integer"),
        ("PICOBOT_STORAGE_RETRY_DELAYS_MS", "100,-5", "greater than or equal to 0"),
        ("PICOBOT_TIME_ZONE", "Mars/Olympus", "unknown time zone"),
        ("PICOBOT_LOG_LEVEL", "loud", "should be DEBUG, INFO"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(env, name, raw, said) -> None:
    env(**{name: raw})
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(f"{name}={raw}: ") and said in message
    assert "\n" not in message


def test_every_bad_variable_is_named_on_the_same_line(env) -> None:
    env(PICOBOT_LLM_IDLE_TIMEOUT="nan", PICOBOT_INBOX_CAPACITY="-1", PICOBOT_LLM_PROVIDER="bogus")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "\n" not in message
    for name in ("PICOBOT_LLM_IDLE_TIMEOUT=nan", "PICOBOT_INBOX_CAPACITY=-1", "PICOBOT_LLM_PROVIDER=bogus"):
        assert name in message


def test_the_lease_must_outlast_its_renewal(env) -> None:
    env(PICOBOT_LEASE_SECONDS="5", PICOBOT_LEASE_RENEW_SECONDS="5")
    with pytest.raises(ConfigError, match="PICOBOT_LEASE_RENEW_SECONDS must be below PICOBOT_LEASE_SECONDS"):
        load_settings()


def test_the_schedule_grace_must_outlast_a_few_polls(env) -> None:
    """A grace under the poll interval would call every run of a running server missed."""
    env(PICOBOT_SCHEDULE_GRACE_SECONDS="1")
    with pytest.raises(ConfigError, match=r"PICOBOT_SCHEDULE_GRACE_SECONDS \(1 s\) must be at least 3 × "):
        load_settings()
    env(PICOBOT_SCHEDULE_GRACE_SECONDS="30", PICOBOT_SCHEDULE_POLL_SECONDS="10")
    assert load_settings().schedule_grace_seconds == 30
    env(PICOBOT_SCHEDULE_GRACE_SECONDS="1", PICOBOT_SCHEDULE_POLL_SECONDS="0")  # the scheduler is off
    assert load_settings().schedule_grace_seconds == 1


def test_blank_means_the_default_and_values_are_parsed_as_written(env) -> None:
    env(
        PICOBOT_INBOX_CAPACITY="  ",
        PICOBOT_LLM_PROVIDER=" OpenAI ",
        PICOBOT_LOG_LEVEL="debug",
        PICOBOT_DEBUG="yes",
        PICOBOT_ALLOWED_HOSTS="chat.example.com, ,10.0.0.2",
        PICOBOT_STORAGE_RETRY_DELAYS_MS="5,10",
        PICOBOT_LLM_IDLE_TIMEOUT="2.5",
        PICOBOT_LLM_API_KEY="sk-secret-value-123",
    )
    config = load_settings()
    assert config.inbox_capacity == 32
    assert (config.llm_provider, config.log_level, config.debug) == ("openai", "DEBUG", True)
    assert config.allowed_hosts == ["chat.example.com", "10.0.0.2"]
    assert config.storage_retry_delays_ms == [5, 10]
    assert config.llm_idle_timeout == 2.5
    assert "sk-secret-value-123" not in repr(config)
    assert config.llm_api_key.get_secret_value() == "sk-secret-value-123"


def test_the_defaults_are_the_documented_ones(env) -> None:
    config = load_settings()
    assert (config.llm_provider, config.inbox_capacity, config.lease_seconds) == ("replay", 32, 15.0)
    assert config.allowed_hosts == ["localhost", "127.0.0.1", "[::1]"]
    assert config.storage_retry_delays_ms == [100, 200, 300]


def test_replace_validates_and_knows_its_fields(env) -> None:
    config = load_settings()
    assert config.replace(inbox_capacity=2).inbox_capacity == 2
    assert config.inbox_capacity == 32, "a copy: the original is unchanged"
    with pytest.raises(ValidationError):
        config.replace(inbox_capacity=0)
    with pytest.raises(ValidationError):
        config.replace(llm_idle_timeout=float("nan"))
    with pytest.raises(TypeError, match="INBOX_CAPACITY"):
        config.replace(INBOX_CAPACITY=3)


def test_the_settings_are_frozen(env) -> None:
    with pytest.raises(ValidationError):
        load_settings().inbox_capacity = 3  # type: ignore[misc]


def test_the_provider_config_carries_the_llm_fields(env) -> None:
    env(
        PICOBOT_LLM_PROVIDER="anthropic",
        PICOBOT_LLM_MODEL="claude",
        PICOBOT_LLM_API_KEY="k" * 20,
        PICOBOT_LLM_THINKING_BUDGET="2048",
        PICOBOT_LLM_HOOKS="a.install,b.install",
    )
    provider = load_settings().provider_config()
    assert (provider.provider, provider.model, provider.api_key) == ("anthropic", "claude", "k" * 20)
    assert (provider.thinking_budget, provider.hooks) == (2048, ("a.install", "b.install"))


def test_every_field_has_a_meaning_and_its_variable_name() -> None:
    for name, field in PicoBotSettings.model_fields.items():
        assert field.description, name
        assert env_name(name) == "PICOBOT_" + name.upper()


def test_the_readme_table_equals_the_settings_model() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert with_settings_table(readme) == readme, (
        "README's configuration table differs from picobot_site/config.py: "
        "run `python -m picobot_site.config_table --write README.md`"
    )
    assert settings_table().count("\n| `PICOBOT_") == len(PicoBotSettings.model_fields)


def test_the_table_markers_are_required() -> None:
    with pytest.raises(ValueError, match="markers"):
        with_settings_table("# no table here\n")


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("PICOBOT_LLM_IDLE_TIMEOUT", "nan"),
        ("PICOBOT_INBOX_CAPACITY", "-1"),
        ("PICOBOT_LLM_PROVIDER", "bogus"),
    ],
)
def test_serve_stops_with_one_line_naming_the_variable(tmp_path, name, raw) -> None:
    done = manage("serve", "--port", "0", PICOBOT_DATA_DIR=str(tmp_path), **{name: raw})
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"PicoBot configuration error: {name}={raw}: "), lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_error_reports_show_no_database_or_redis_password(settings) -> None:
    from django.views.debug import get_default_exception_reporter_filter

    url = "redis://:redisPassw0rdXYZ@127.0.0.1:6379/7"
    settings.PICOBOT = settings.PICOBOT.replace(
        database_url="postgres://u:dbPassw0rdXYZ@127.0.0.1:5432/x", redis_url=url
    )
    settings.REDIS_URL = url
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "x", "CONFIG": {"hosts": [{"address": url}]}}}
    shown = repr(get_default_exception_reporter_filter().get_safe_settings())
    assert "Passw0rdXYZ" not in shown
    assert "PICOBOT" in shown and "inbox_capacity" in shown, "the settings object itself is still shown"


def test_a_secret_variable_s_value_is_never_echoed(env) -> None:
    env(PICOBOT_REDIS_URL="redis//:hunter2pw@cache")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value).startswith("PICOBOT_REDIS_URL: should be a redis://")
    assert "hunter2pw" not in str(caught.value)


@pytest.mark.parametrize(
    ("name", "raw", "said"),
    [
        ("PICOBOT_CSRF_TRUSTED_ORIGINS", "chat.example.com", "needs its scheme"),
        ("PICOBOT_LEASE_SECONDS", "1e16", "less than or equal to"),
        ("PICOBOT_GROUP_EXPIRY_SECONDS", "1" + "0" * 30, "less than or equal to"),
        ("PICOBOT_DATABASE_POOL_SIZE", "1", "greater than or equal to 2"),
        ("PICOBOT_REDIS_MAX_CONNECTIONS", "2", "greater than or equal to 10"),
        ("PICOBOT_WORKER_ID", "w" * 201, "at most 200 characters"),
    ],
)
def test_values_the_database_or_the_layer_would_refuse_later_are_refused_at_start(
    env, name, raw, said
) -> None:
    env(**{name: raw})
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value).startswith(f"{name}=") and said in str(caught.value)


def test_an_unprintable_or_long_value_is_shown_escaped_and_cut(env) -> None:
    env(PICOBOT_INBOX_CAPACITY="1\n2", PICOBOT_MAX_ITERATIONS="9" * 5000)
    message = str(pytest.raises(ConfigError, load_settings).value)
    assert "\n" not in message and "PICOBOT_INBOX_CAPACITY='1\\n2'" in message
    assert len(message) < 400


def test_names_are_case_sensitive_and_log_levels_are_pythons(env, monkeypatch) -> None:
    monkeypatch.setenv("picobot_inbox_capacity", "-1")
    env(PICOBOT_LOG_LEVEL="warn")
    config = load_settings()
    assert config.inbox_capacity == 32, "a lower-case name is not ours"
    assert config.log_level == "WARN"
    env(PICOBOT_LOG_LEVEL="15")
    assert load_settings().log_level == 15
    env(PICOBOT_LOG_LEVEL="loud")
    with pytest.raises(ConfigError, match="PICOBOT_LOG_LEVEL=loud"):
        load_settings()


def test_max_tokens_zero_sends_none(env) -> None:
    from providers.factory import build_provider

    env(PICOBOT_LLM_MAX_TOKENS="0", PICOBOT_LLM_PROVIDER="openai", PICOBOT_LLM_MODEL="m")
    env(PICOBOT_LLM_BASE_URL="http://127.0.0.1:9/v1")
    config = load_settings().provider_config()
    assert config.max_tokens == 0
    assert build_provider(config).max_tokens is None, "0 reaches the provider as no limit"


@pytest.mark.parametrize(
    ("name", "raw", "said"),
    [
        ("PICOBOT_DATABASE_URL", "bogus://x", "not a database URL (unknown scheme"),
        ("PICOBOT_DATABASE_URL", "postgres://u:secretpw@h:port/db", "not a database URL (malformed"),
        ("PICOBOT_DATA_DIR", "/proc/picobot-cannot-be-here", "cannot create it"),
    ],
)
def test_settings_stop_with_one_line_when_django_cannot_use_a_value(tmp_path, name, raw, said) -> None:
    done = manage("check", **{"PICOBOT_DATA_DIR": str(tmp_path), name: raw})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith(f"PicoBot configuration error: {name}") and said in done.stderr
    assert "secretpw" not in done.stderr


def test_variables_named_like_fields_are_not_settings(env, monkeypatch) -> None:
    for name in ("debug", "inbox_capacity", "secret_key", "Picobot_Debug"):
        monkeypatch.setenv(name, "1")
    config = load_settings()
    assert (config.debug, config.inbox_capacity, config.secret_key.get_secret_value()) == (False, 32, "")


@pytest.mark.parametrize(
    ("name", "raw", "said"),
    [
        ("PICOBOT_TIME_ZONE", "Europe", "unknown time zone"),
        ("PICOBOT_TIME_ZONE", "x" * 3000, "unknown time zone"),
        ("PICOBOT_ALLOWED_HOSTS", "localhost:8771", "is not a host name"),
        ("PICOBOT_ALLOWED_HOSTS", "http://localhost", "is not a host name"),
        ("PICOBOT_LLM_BASE_URL", "notaurl", "http:// or https:// URL"),
        ("PICOBOT_LLM_BASE_URL", "ftp://x/v1", "http:// or https:// URL"),
        ("PICOBOT_GROUP_EXPIRY_SECONDS", "3", "PICOBOT_GROUP_REFRESH_SECONDS must be below"),
    ],
)
def test_values_that_would_break_requests_or_live_updates_are_refused(env, name, raw, said) -> None:
    env(**{name: raw})
    message = str(pytest.raises(ConfigError, load_settings).value)
    assert said in message and "\n" not in message and len(message) < 400


def test_hosts_django_matches_are_accepted(env) -> None:
    env(PICOBOT_ALLOWED_HOSTS="chat.example.com,.example.org,10.0.0.2,[::1],*")
    assert load_settings().allowed_hosts == ["chat.example.com", ".example.org", "10.0.0.2", "[::1]", "*"]


def test_a_key_that_cannot_be_sent_in_a_header_is_refused_without_showing_it(env) -> None:
    env(PICOBOT_LLM_API_KEY="sk-supersecretvalue123\u00e9")
    message = str(pytest.raises(ConfigError, load_settings).value)
    assert message.startswith("PICOBOT_LLM_API_KEY: should be printable ASCII")
    assert "supersecret" not in message


def test_surrounding_spaces_are_dropped_for_every_type(env) -> None:
    env(PICOBOT_DEBUG=" 1 ", PICOBOT_INBOX_CAPACITY=" 7", PICOBOT_LLM_MODEL=" m ")
    config = load_settings()
    assert (config.debug, config.inbox_capacity, config.llm_model) == (True, 7, "m")


def test_a_data_directory_with_url_characters_holds_the_database_file(tmp_path) -> None:
    data_dir = tmp_path / "hash#1 %20x"
    script = "from django.conf import settings; print(settings.DATABASES['default']['NAME'])"
    done = manage("shell", "-c", script, PICOBOT_DATA_DIR=str(data_dir))
    assert done.stdout.strip().splitlines()[-1] == str(data_dir / "picobot.sqlite3"), done.stderr


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("postgres://u:secretpw@127.0.0.1:5432", "names no database"),
        ("mysql://u:secretpw@127.0.0.1/db", "PicoBot runs on PostgreSQL or SQLite"),
    ],
)
def test_a_database_url_picobot_cannot_use_is_one_line(tmp_path, url, said) -> None:
    done = manage("check", PICOBOT_DATA_DIR=str(tmp_path), PICOBOT_DATABASE_URL=url)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert said in done.stderr and "secretpw" not in done.stderr


def test_error_reports_hide_the_authorization_header_and_the_llm_url(settings) -> None:
    from django.test import RequestFactory
    from django.views.debug import get_default_exception_reporter_filter

    reporter = get_default_exception_reporter_filter()
    request = RequestFactory().get("/x", HTTP_AUTHORIZATION="Bearer pb_SECRET_TOKEN")
    assert "pb_SECRET_TOKEN" not in repr(reporter.get_safe_request_meta(request))
    settings.PICOBOT = settings.PICOBOT.replace(llm_base_url="http://bob:urlPW@host/v1?api-key=urlKEY")
    shown = repr(reporter.get_safe_settings())
    assert "urlPW" not in shown and "urlKEY" not in shown


@pytest.mark.parametrize(
    ("name", "raw", "said"),
    [
        ("PICOBOT_ALLOWED_HOSTS", ",", "names no host"),
        ("PICOBOT_ALLOWED_HOSTS", "a b", "is not a host name"),
        ("PICOBOT_ALLOWED_HOSTS", "user@host", "is not a host name"),
        ("PICOBOT_CSRF_TRUSTED_ORIGINS", "https://", "needs its scheme and host"),
        ("PICOBOT_LLM_BASE_URL", "http://h:0/v1", "http:// or https:// URL"),
        ("PICOBOT_TIME_ZONE", "localtime", "unknown time zone"),
        ("PICOBOT_STORAGE_RETRY_DELAYS_MS", "99999999999", "less than or equal to 60000"),
    ],
)
def test_loose_values_are_refused(env, name, raw, said) -> None:
    env(**{name: raw})
    assert said in str(pytest.raises(ConfigError, load_settings).value)


def test_a_base_url_with_credentials_is_never_echoed(env) -> None:
    env(PICOBOT_LLM_BASE_URL="http://u:topsecretpw@h:99999/v1")
    message = str(pytest.raises(ConfigError, load_settings).value)
    assert message.startswith("PICOBOT_LLM_BASE_URL: ") and "topsecretpw" not in message


def test_an_in_memory_sqlite_url_is_refused(tmp_path) -> None:
    done = manage("check", PICOBOT_DATA_DIR=str(tmp_path), PICOBOT_DATABASE_URL="sqlite://")
    assert done.returncode != 0 and "PICOBOT_DATABASE_URL: names no database" in done.stderr, done.stderr


def test_the_table_tool_writes_the_readme_and_refuses_a_file_without_markers(tmp_path, capsys) -> None:
    from picobot_site.config_table import TABLE_END, TABLE_START, main

    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{TABLE_START}\nold\n{TABLE_END}\n", encoding="utf-8")
    main(["--write", str(readme)])
    assert readme.read_text(encoding="utf-8") == f"# x\n{TABLE_START}\n{settings_table()}{TABLE_END}\n"
    for bad in (tmp_path / "missing.md", tmp_path / "plain.md"):
        if bad.name == "plain.md":
            bad.write_text("# no markers\n", encoding="utf-8")
        with pytest.raises(SystemExit) as caught:
            main(["--write", str(bad)])
        assert caught.value.code == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and str(bad) in error
