"""``manage.py chat`` and ``createtoken --save``: where the client's URL and token come from.

Flags > ``PICOBOT_URL``/``PICOBOT_TOKEN`` > the saved file (``$XDG_CONFIG_HOME/picobot/
credentials.json``, mode 0600). The app itself is replaced by a recorder: the live UI is tested in
test_tui_live.py.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from conversations.auth.tokens import user_for_token
from tests.e2e.serve_process import REPO
from tui.app import ChatApp
from tui.config import ConfigError, chat_url, resolve


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("PICOBOT_URL", raising=False)
    monkeypatch.delenv("PICOBOT_TOKEN", raising=False)
    return tmp_path


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """``ChatApp.run`` records (url, token) instead of taking over the terminal."""
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(
        ChatApp, "run", lambda self: calls.append((self.connection.url, self.connection.token))
    )
    return calls


@pytest.mark.django_db
def test_createtoken_save_writes_a_private_file_that_chat_logs_in_with(config_home: Path, started: list):
    err = StringIO()
    out = StringIO()
    call_command("createtoken", "alice", "--save", "--url", "wss://chat.example.com", stdout=out, stderr=err)
    token = out.getvalue().strip()
    path = config_home / "picobot" / "credentials.json"
    assert str(path) in err.getvalue()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {
        "url": "wss://chat.example.com",
        "username": "alice",
        "token": token,
    }
    assert user_for_token(token).username == "alice"

    call_command("chat")
    assert started == [("wss://chat.example.com/ws/chat/", token)]


@pytest.mark.django_db
def test_createtoken_save_defaults_to_the_local_server_and_refuses_a_bad_url(config_home: Path):
    call_command("createtoken", "bob", "--save", stdout=StringIO(), stderr=StringIO())
    assert (
        json.loads((config_home / "picobot" / "credentials.json").read_text())["url"] == "ws://127.0.0.1:8000"
    )
    with pytest.raises(CommandError, match="--url"):
        call_command("createtoken", "bob", "--save", "--url", "ftp://x", stdout=StringIO(), stderr=StringIO())


def test_flags_beat_the_environment_which_beats_the_saved_file(config_home: Path, started: list):
    path = config_home / "picobot" / "credentials.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"url": "ws://saved:1", "username": "alice", "token": "pb_saved"}))
    env = {"XDG_CONFIG_HOME": str(config_home)}
    assert resolve(None, None, env).token == "pb_saved"
    assert resolve(None, None, {**env, "PICOBOT_TOKEN": "pb_env", "PICOBOT_URL": "ws://env:2"}) == resolve(
        None, "pb_env", {**env, "PICOBOT_URL": "ws://env:2"}
    )
    flagged = resolve(
        "https://flag", "pb_flag", {**env, "PICOBOT_TOKEN": "pb_env", "PICOBOT_URL": "ws://env:2"}
    )
    assert (flagged.url, flagged.token) == ("wss://flag/ws/chat/", "pb_flag")

    call_command("chat", "--token", "pb_flag", "--url", "ws://127.0.0.1:9")
    assert started == [("ws://127.0.0.1:9/ws/chat/", "pb_flag")]


def test_chat_without_any_token_says_how_to_get_one(config_home: Path, started: list):
    with pytest.raises(CommandError, match="createtoken USERNAME --save"):
        call_command("chat")
    assert started == []


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("ws://127.0.0.1:8000", "ws://127.0.0.1:8000/ws/chat/"),
        ("wss://chat.example.com/", "wss://chat.example.com/ws/chat/"),
        ("http://h:1/ws/chat/", "ws://h:1/ws/chat/"),
    ],
)
def test_chat_url_names_the_chat_endpoint(given: str, url: str):
    assert chat_url(given) == url


def test_chat_url_refuses_other_schemes():
    with pytest.raises(ConfigError):
        chat_url("ftp://host")


def test_chat_help_documents_the_url_token_and_environment():
    done = subprocess.run(
        [sys.executable, "manage.py", "chat", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    help_text = " ".join(done.stdout.split())
    for part in ("--url", "--token", "PICOBOT_URL", "PICOBOT_TOKEN", "createtoken USERNAME --save", "wss://"):
        assert part in help_text
