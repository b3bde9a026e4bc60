"""The replay identity of ``provider_state``: who may get a message's replay data back
(seed 003 §6.2).

A provider stamps ``{"provider": name, "endpoint": …}`` (:func:`replay_identity`) on the
``provider_state`` it produces; :func:`replays_to` lets that state go back only to a provider
with the same name *and* endpoint (:func:`normalise_endpoint` of its base URL). The rule and its
reasons are in ``providers/README.md``.

Pure module: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit


def normalise_endpoint(base_url: str) -> str:
    """The replay endpoint of a base URL: lower-case host, non-default port, path without a
    trailing slash; no scheme, credentials, query or fragment.

    ``https://API.deepseek.com/v1/`` → ``api.deepseek.com/v1``; ``http://127.0.0.1:8080/v1`` →
    ``127.0.0.1:8080/v1``. Two base URLs with the same endpoint reach the same API.
    """
    parts = urlsplit(base_url.strip())
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != default:
        netloc += f":{port}"
    return netloc + parts.path.rstrip("/")


def replay_identity(provider: str, endpoint: str | None) -> dict[str, str]:
    """The identity keys a provider stamps on the ``provider_state`` it produces."""
    identity = {"provider": provider}
    if endpoint is not None:
        identity["endpoint"] = endpoint
    return identity


def replays_to(state: Any, provider: str, endpoint: str | None) -> bool:
    """Whether ``provider_state`` may be replayed to the provider ``provider`` at ``endpoint``.

    Replay state is keyed by the endpoint, not only the provider name (seed 003 §6.2): two
    OpenAI-compatible servers (DeepSeek, then OpenAI) are both ``openai``, and an Anthropic
    signature is only valid at the API that signed it. State is replayed when both the name and
    the endpoint match. A model change on the same endpoint keeps replay (signatures and
    reasoning are valid across one API's models). State written before endpoints were recorded
    (no ``endpoint`` key) matches only a provider without an endpoint — never an HTTP provider —
    so it is read as "no replay": the same endpoint cannot be proven.
    """
    return (
        isinstance(state, Mapping) and state.get("provider") == provider and state.get("endpoint") == endpoint
    )
