"""Fixtures of the model preset tests: a ``PICOBOT_CONFIG`` file of presets, and the gateway's
fixtures (fast worker loops, an empty runtime session cache; the Feishu fake for ``/model`` there)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conversations.runtime.provider import reset
from tests.conversations.feishu.conftest import feishu, feishu_server  # noqa: F401 - fixtures used here
from tests.conversations.gateway_fixtures import fast_picobot, fresh_runtime_sessions  # noqa: F401 - autouse here


def preset_table(name: str, base_url: str, **keys: object) -> str:
    """One ``[models.NAME]`` table: an OpenAI-compatible preset at ``base_url``, model
    ``model-NAME``, plus ``keys`` (JSON-written values are TOML ones: strings, numbers, lists)."""
    values = {"provider": "openai", "base_url": base_url, "model": f"model-{name}", **keys}
    return f"[models.{name}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())


@pytest.fixture
def presets(settings: object, tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``presets(toml_text)`` makes ``toml_text`` the deployment's ``PICOBOT_CONFIG`` (catalog and
    providers read again); the catalog is forgotten again after the test."""

    def use(text: str) -> Path:
        path = tmp_path / "picobot.toml"
        path.write_text(text, encoding="utf-8")
        settings.PICOBOT = settings.PICOBOT.replace(config=path)
        reset()
        return path

    yield use
    reset()
