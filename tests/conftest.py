"""Shared test fixtures: no outside network, a fresh channel layer per test, fast worker loops."""

from __future__ import annotations

import socket

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

# CI machines have 2 busy cores: never fail a property test for being slow (DESIGN §10).
hypothesis_settings.register_profile("picobot", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("picobot")

_real_connect = socket.socket.connect
_LOOPBACK_PREFIXES = ("127.", "::1", "localhost", "0.0.0.0")


def _guarded_connect(self: socket.socket, address: object) -> object:
    host = address[0] if isinstance(address, tuple) else address
    outside = isinstance(host, str) and not host.startswith(_LOOPBACK_PREFIXES)
    if outside and self.family in (socket.AF_INET, socket.AF_INET6):
        raise RuntimeError(f"tests must not touch the outside network (tried {address!r})")
    return _real_connect(self, address)


@pytest.fixture(autouse=True)
def _no_outside_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)


@pytest.fixture(autouse=True)
def _fresh_channel_layer() -> object:
    """Each test gets its own in-memory layer (its queues belong to that test's event loop)."""
    from channels.layers import channel_layers

    channel_layers.backends = {}
    yield
    channel_layers.backends = {}


@pytest.fixture(autouse=True)
def _fresh_rate_limits() -> object:
    """Each test starts with no failed sign-ins and no messages counted (per-process limiters)."""
    from conversations.auth.throttle import reset_limits

    reset_limits()
    yield
    reset_limits()


@pytest.fixture(autouse=True)
def _fresh_model_presets() -> object:
    """Each test reads the model presets from its own settings (a test that changes
    ``llm_context_window`` gets that window) and starts with no context window learned from an
    overflow (both per-process)."""
    from conversations.agent.learned_limits import LEARNED_LIMITS
    from conversations.runtime.provider import reset

    reset()
    LEARNED_LIMITS.clear()
    yield
    reset()
    LEARNED_LIMITS.clear()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> object:
    """pytest-django's test database, plus: the storage threads' connections close before it is
    dropped (PostgreSQL refuses to drop a database with open sessions)."""
    yield
    from conversations.storage.runner import shutdown_storage_threads

    shutdown_storage_threads()
