"""``manage.py doctor`` (a wrong provider URL is reported clearly)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from pydantic import ValidationError

from providers.testing import openai_events, sse_body

pytestmark = [pytest.mark.django_db]

KEY = "sk-test-secret-key-1234567890"


def doctor(*args: str) -> tuple[str, CommandError | None]:
    out = StringIO()
    try:
        call_command("doctor", *args, stdout=out, stderr=StringIO())
    except CommandError as exc:
        return out.getvalue(), exc
    return out.getvalue(), None


def line(text: str, name: str) -> str:
    found = [chunk for chunk in text.split("\n") if f" {name}:" in chunk[:30]]
    assert found, f"no {name} line in:\n{text}"
    index = text.split("\n").index(found[0])
    rest = text.split("\n")[index + 1 :]
    fix = rest[0] if rest and rest[0].startswith("     fix:") else ""
    return f"{found[0]}\n{fix}".strip()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def use_openai(settings, base_url: str) -> None:
    settings.PICOBOT = settings.PICOBOT.replace(
        llm_provider="openai", llm_base_url=base_url, llm_model="test-model", llm_api_key=KEY
    )


def test_a_wrong_provider_url_is_a_failure_naming_the_setting_and_the_connection_error(settings):
    use_openai(settings, f"http://127.0.0.1:{closed_port()}/v1")
    text, error = doctor("--timeout", "5")
    assert error is not None and "LLM provider" in str(error)
    provider = line(text, "LLM provider")
    assert provider.startswith("FAIL LLM provider: openai at http://127.0.0.1:")
    assert "cannot connect" in provider and "Connection refused" in provider
    assert "fix: check PICOBOT_LLM_BASE_URL" in provider
    assert KEY not in text
    # The other checks still ran and passed.
    assert line(text, "database").startswith("OK") and line(text, "channel layer").startswith("OK")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://127.0.0.1:99999/v1", "(Port out of range 0-65535)"),
        ("not a url", "should be an http:// or https:// URL with a host"),
    ],
)
def test_a_malformed_provider_url_is_named_once_with_the_setting(settings, url, said):
    """Refused when the settings load, so serve and doctor never build a provider from it."""
    with pytest.raises(ValidationError) as caught:
        use_openai(settings, url)
    assert "PICOBOT_LLM_BASE_URL" in str(caught.value) and said in str(caught.value)
    assert str(caught.value).count(said) == 1, "the cause is not repeated"
    assert "ExceptionGroup" not in str(caught.value)


@pytest.mark.parametrize("timeout", ["nan", "inf", "0", "-5"])
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused(timeout):
    text, error = doctor("--timeout", timeout)
    assert str(error) == "--timeout must be a positive number of seconds" and text == ""


def test_a_malformed_ipv6_base_url_names_the_setting(settings):
    with pytest.raises(ValidationError) as caught:
        use_openai(settings, "http://[::1/v1")
    assert "PICOBOT_LLM_BASE_URL" in str(caught.value) and "Invalid IPv6 URL" in str(caught.value)


def test_the_embedded_defaults_pass_with_a_warning_for_the_replay_provider(settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_provider="replay")
    text, error = doctor()
    assert error is None, text
    assert line(text, "database").startswith("OK") and "all migrations applied" in text
    assert line(text, "channel layer").startswith("OK   channel layer: in-memory")
    assert line(text, "LLM provider").startswith("WARN LLM provider: offline replay provider")
    assert "checks: 0 failed, 1 warning(s)." in text


class _FakeOpenAI(BaseHTTPRequestHandler):
    status = 200
    seen: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).seen.append({"path": self.path, "auth": self.headers.get("authorization"), "body": body})
        if self.status == 200:
            payload, ctype = sse_body(openai_events("p")), "text/event-stream"
        else:
            payload = json.dumps(
                {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
            ).encode()
            ctype = "application/json"
        self.send_response(self.status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_openai() -> Iterator[tuple[str, type[_FakeOpenAI]]]:
    handler = type("Handler", (_FakeOpenAI,), {"seen": [], "status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    server.shutdown()
    server.server_close()


def test_a_reachable_provider_answers_one_token(settings, fake_openai):
    url, handler = fake_openai
    use_openai(settings, url)
    text, error = doctor()
    assert error is None, text
    assert line(text, "LLM provider").startswith(
        f"OK   LLM provider: openai at {url}, model test-model: answered"
    )
    [request] = handler.seen
    assert request["path"] == "/v1/chat/completions" and request["auth"] == f"Bearer {KEY}"
    assert request["body"]["max_tokens"] == 1 and request["body"]["stream"] is True
    assert KEY not in text


def test_a_refused_key_is_a_failure_naming_the_key_setting(settings, fake_openai):
    url, handler = fake_openai
    handler.status = 401
    use_openai(settings, url)
    text, error = doctor()
    assert error is not None
    provider = line(text, "LLM provider")
    assert provider.startswith("FAIL") and "HTTP 401" in provider and "PICOBOT_LLM_API_KEY" in provider
    assert len(handler.seen) == 1  # no retries


def test_no_llm_request_only_builds_the_provider(settings, fake_openai):
    url, handler = fake_openai
    use_openai(settings, url)
    text, error = doctor("--no-llm-request")
    assert error is None and "no request made" in text and handler.seen == []


def test_a_configuration_error_names_the_variable(settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_provider="openai", llm_model="")
    text, error = doctor()
    assert error is not None and "PICOBOT_LLM_MODEL" in line(text, "LLM provider")


def test_an_unreachable_redis_is_a_failure_naming_the_setting(settings):
    url = f"redis://:hunter2@127.0.0.1:{closed_port()}/0"
    settings.REDIS_URL = url
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": url, "socket_connect_timeout": 2}]},
        }
    }
    text, error = doctor("--timeout", "5")
    layer = line(text, "channel layer")
    assert error is not None and layer.startswith("FAIL channel layer: Redis at redis://127.0.0.1:")
    assert "PICOBOT_REDIS_URL" in layer and "hunter2" not in text


def test_settings_problems_fail_with_how_to_fix_them(settings, tmp_path):
    settings.DEBUG = True
    settings.SECRET_KEY = "change-me"
    settings.ALLOWED_HOSTS = []
    settings.DATA_DIR = tmp_path / "does-not-exist"
    text, error = doctor("--no-llm-request")
    assert error is not None
    assert "Failed: DEBUG, ALLOWED_HOSTS, secret key, data directory." in str(error)
    assert "unset PICOBOT_DEBUG" in line(text, "DEBUG")
    assert "PICOBOT_ALLOWED_HOSTS" in line(text, "ALLOWED_HOSTS")
    assert "PICOBOT_SECRET_KEY" in line(text, "secret key") and "change-me" not in text
    assert "PICOBOT_DATA_DIR" in line(text, "data directory")


def test_unapplied_migrations_fail_with_the_migrate_command(monkeypatch):
    from django.db.migrations.executor import MigrationExecutor

    def pending(self, targets, clean_start=False):
        # One migration left to apply, whatever later migrations the project has by now.
        return [(self.loader.graph.nodes[("conversations", "0003_sessions_titles_context")], False)]

    monkeypatch.setattr(MigrationExecutor, "migration_plan", pending)
    text, error = doctor("--no-llm-request")
    assert error is not None
    assert "migration(s) not applied: conversations.0003_sessions_titles_context" in line(text, "database")
    assert "python manage.py migrate" in line(text, "database")


def test_the_configuration_line_names_the_set_variables_without_their_values(monkeypatch):
    monkeypatch.setenv("PICOBOT_INBOX_CAPACITY", "5")
    monkeypatch.setenv("PICOBOT_LLM_API_KEY", "sk-doctor-secret-0123456789")
    monkeypatch.setenv("PICOBOT_TEST_SOMETHING", "x")
    text, _ = doctor()
    said = line(text, "configuration")
    assert said.startswith("OK") and "PICOBOT_INBOX_CAPACITY" in said and "PICOBOT_LLM_API_KEY" in said
    assert "sk-doctor-secret" not in text and "PICOBOT_TEST_SOMETHING" not in text
    assert "WARN configuration" not in text


def test_the_terminal_clients_url_and_token_are_not_taken_for_misspelt_settings(monkeypatch):
    monkeypatch.setenv("PICOBOT_URL", "ws://127.0.0.1:8000/ws/chat/")
    monkeypatch.setenv("PICOBOT_TOKEN", "pb_doctor-client-token")
    text, error = doctor()
    assert error is None, text
    assert "WARN configuration" not in text and "PICOBOT_TOKEN" not in text and "pb_doctor" not in text


def test_a_misspelt_variable_is_a_warning_naming_it(monkeypatch):
    monkeypatch.setenv("PICOBOT_INBOX_CAPASITY", "1")
    text, error = doctor()
    assert error is None, text
    assert "WARN configuration: not settings, ignored: PICOBOT_INBOX_CAPASITY" in text


def test_a_tool_module_that_cannot_load_fails_the_tools_check(settings):
    settings.PICOBOT = settings.PICOBOT.replace(tool_modules=["no_such_module_anywhere"])
    text, error = doctor()
    assert error is not None
    said = line(text, "tools")
    assert said.startswith("FAIL") and "no_such_module_anywhere" in said and "PICOBOT_TOOL_MODULES" in text


def test_the_provider_is_built_as_serve_builds_it_before_the_probe(settings):
    settings.PICOBOT = settings.PICOBOT.replace(
        llm_provider="anthropic", llm_model="claude", llm_api_key="k" * 20, llm_thinking_budget=500
    )
    text, error = doctor()
    assert error is not None and "PICOBOT_LLM_THINKING_BUDGET" in line(text, "LLM provider")
