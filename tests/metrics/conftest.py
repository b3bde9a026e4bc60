"""Metrics tests: the gateway's fixtures (a worker, WebSocket clients, fast loops) and a scrape helper."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from conversations.runtime import provider as runtime_provider
from tests.conversations.conftest import connect, start_worker  # noqa: F401 - fixtures used here
from tests.conversations.gateway_fixtures import fast_picobot, fresh_runtime_sessions  # noqa: F401 - autouse
from tests.services.test_scale_out import postgres_url  # noqa: F401 - a fresh PostgreSQL database

METRICS_TOKEN = "scrape-token-0123456789"


@pytest.fixture
def metrics_on(settings: object) -> str:
    """``PICOBOT_METRICS_TOKEN`` set; returns the token."""
    settings.PICOBOT = settings.PICOBOT.replace(metrics_token=SecretStr(METRICS_TOKEN))
    return METRICS_TOKEN


PRESETS = """
default_model = "house"

[models.house]
provider = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "house-1"
price_input = 2
price_output = 8
price_cached = 1
"""


@pytest.fixture
def priced_preset(settings: object, tmp_path: Path) -> None:
    """The preset ``house`` (2 / 8 per million input / output tokens) is the default."""
    path = tmp_path / "picobot.toml"
    path.write_text(PRESETS)
    settings.PICOBOT = settings.PICOBOT.replace(config=path)
    runtime_provider.reset()
    yield
    runtime_provider.reset()
