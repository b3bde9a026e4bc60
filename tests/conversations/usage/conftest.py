"""Fixtures of the usage tests: the gateway's autouse ones, priced presets and a clean writer queue."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conversations.runtime.provider import reset
from conversations.usage.writer import usage_writer
from tests.conversations.gateway_fixtures import fast_picobot, fresh_runtime_sessions  # noqa: F401 - autouse here

PRICED_PRESETS = """
default_model = "priced"

[models.priced]
provider = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "gpt-priced"
context_window = 8000
price_input = 2.5
price_output = 10
price_cached = 1.25

[models.cheap]
provider = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "gpt-cheap"
price_input = 0.1
price_output = 0.4
"""


@pytest.fixture(autouse=True)
def clean_usage_queue() -> Iterator[None]:
    """No call of an earlier test is written into this one's database, nor this one's later."""
    usage_writer.discard()
    yield
    usage_writer.discard()


@pytest.fixture
def priced_presets(settings: object, tmp_path: Path) -> Iterator[Path]:
    """``PICOBOT_CONFIG`` with the presets ``priced`` (the default) and ``cheap``, with prices."""
    path = tmp_path / "picobot.toml"
    path.write_text(PRICED_PRESETS, encoding="utf-8")
    settings.PICOBOT = settings.PICOBOT.replace(config=path)
    reset()
    yield path
    reset()
