"""Where the terminal client connects and with which token: flags > environment > saved file.

The saved file (``createtoken --save``) is ``$XDG_CONFIG_HOME/picobot/credentials.json``
(``~/.config/picobot/`` by default), mode 0600: ``{"url", "username", "token"}``. The environment
variables are ``PICOBOT_URL`` and ``PICOBOT_TOKEN`` (client settings: the server ignores them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_URL = "ws://127.0.0.1:8000"
CHAT_PATH = "/ws/chat/"


class ConfigError(Exception):
    """The URL or the saved credentials cannot be used; the message says what to do."""


@dataclass(frozen=True)
class ClientConfig:
    """``url`` is the full WebSocket URL (``ws[s]://host:port/ws/chat/``); ``username`` is what the
    saved file says (empty otherwise)."""

    url: str
    token: str
    username: str = ""


def credentials_path(env: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CONFIG_HOME/picobot/credentials.json``, else under ``~/.config``."""
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "picobot" / "credentials.json"


def save_credentials(url: str, username: str, token: str, path: Path | None = None) -> Path:
    """Write the credentials file (created 0600, its folder 0700, replaced atomically); returns
    its path. Raises OSError when it cannot be written."""
    path = path or credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"url": url, "username": username, "token": token}, fh, indent=2)
        fh.write("\n")
    os.chmod(tmp, 0o600)  # an existing .tmp keeps its old mode through O_CREAT
    os.replace(tmp, path)
    return path


def load_credentials(path: Path | None = None) -> dict[str, str] | None:
    """The saved ``{url, username, token}``; None when there is no file. Raises ConfigError when
    it is unreadable or not such an object."""
    path = path or credentials_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k, ""), str) for k in ("url", "username", "token")
    ):
        raise ConfigError(f"{path} is not a PicoBot credentials file (run createtoken USER --save again)")
    return data


def chat_url(url: str) -> str:
    """``ws://host:port`` (or http/https, or a full ``…/ws/chat/``) as the chat endpoint URL.
    Raises ConfigError for another scheme or no host."""
    parts = urlsplit(url.strip())
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss") or not parts.hostname:
        raise ConfigError(f"the server URL must look like ws://host:port or wss://host, got {url!r}")
    path = parts.path if parts.path not in ("", "/") else CHAT_PATH
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def resolve(
    url: str | None, token: str | None, env: Mapping[str, str] = os.environ, path: Path | None = None
) -> ClientConfig:
    """Each of URL and token from the flag, else ``PICOBOT_URL``/``PICOBOT_TOKEN``, else the saved
    file; the URL defaults to DEFAULT_URL. Raises ConfigError when no token is found."""
    saved = load_credentials(path or credentials_path(env)) or {}
    chosen_url = url or env.get("PICOBOT_URL") or saved.get("url") or DEFAULT_URL
    chosen_token = token or env.get("PICOBOT_TOKEN") or saved.get("token") or ""
    if not chosen_token.strip():
        raise ConfigError(
            "no token: pass --token, set PICOBOT_TOKEN, or save one with "
            "'manage.py createtoken USERNAME --save'"
        )
    return ClientConfig(chat_url(chosen_url), chosen_token.strip(), saved.get("username", ""))
