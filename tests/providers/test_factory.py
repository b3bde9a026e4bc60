"""build_provider: the PICOBOT settings dict → a provider, with clear configuration errors."""

from __future__ import annotations

import pytest

from providers.anthropic import AnthropicProvider
from providers.factory import build_provider
from providers.openai_compat import OpenAICompatProvider
from providers.replay import ReplayProvider

BASE = {
    "LLM_PROVIDER": "",
    "LLM_BASE_URL": "",
    "LLM_API_KEY": "",
    "LLM_MODEL": "",
    "LLM_MAX_TOKENS": 4096,
    "LLM_THINK_TAGS": True,
    "LLM_IMPLICIT_THINK_START": False,
    "LLM_CONNECT_TIMEOUT": 10.0,
    "LLM_FIRST_BYTE_TIMEOUT": 60.0,
    "LLM_IDLE_TIMEOUT": 60.0,
    "LLM_MAX_RETRIES": 2,
    "REPLAY_DIR": "",
}


@pytest.mark.parametrize("kind", ["", "replay", "REPLAY"])
def test_no_provider_means_replay(kind: str) -> None:
    provider = build_provider({**BASE, "LLM_PROVIDER": kind})
    assert isinstance(provider, ReplayProvider) and provider.offline


def test_openai_takes_every_setting() -> None:
    provider = build_provider(
        {
            **BASE,
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": "http://localhost:11434/v1",
            "LLM_MODEL": "qwen3",
            "LLM_THINK_TAGS": False,
            "LLM_IMPLICIT_THINK_START": True,
            "LLM_IDLE_TIMEOUT": 5.0,
            "LLM_FIRST_BYTE_TIMEOUT": 7.0,
            "LLM_MAX_RETRIES": 0,
        }
    )
    assert isinstance(provider, OpenAICompatProvider) and not provider.offline
    assert (provider.base_url, provider.model, provider.max_tokens) == (
        "http://localhost:11434/v1",
        "qwen3",
        4096,
    )
    assert (provider.think_tags, provider.implicit_think_start) == (False, True)
    assert (provider.idle_timeout, provider.first_byte_timeout, provider.max_retries) == (5.0, 7.0, 0)


def test_openai_defaults_the_base_url_but_then_needs_a_key() -> None:
    provider = build_provider(
        {**BASE, "LLM_PROVIDER": "openai", "LLM_MODEL": "gpt-4o-mini", "LLM_API_KEY": "sk-x"}
    )
    assert provider.base_url == "https://api.openai.com/v1"
    with pytest.raises(ValueError, match="PICOBOT_LLM_API_KEY"):
        build_provider({**BASE, "LLM_PROVIDER": "openai", "LLM_MODEL": "gpt-4o-mini"})


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_model_is_required(kind: str) -> None:
    with pytest.raises(ValueError, match="PICOBOT_LLM_MODEL"):
        build_provider({**BASE, "LLM_PROVIDER": kind, "LLM_API_KEY": "k"})


def test_anthropic() -> None:
    provider = build_provider(
        {**BASE, "LLM_PROVIDER": "anthropic", "LLM_MODEL": "claude-sonnet-4-5", "LLM_API_KEY": "k"}
    )
    assert isinstance(provider, AnthropicProvider)
    assert provider.base_url == "https://api.anthropic.com" and provider.name == "anthropic"


def test_unknown_provider_names_the_variable() -> None:
    with pytest.raises(ValueError, match="PICOBOT_LLM_PROVIDER"):
        build_provider({**BASE, "LLM_PROVIDER": "gemini"})


def test_a_bad_replay_dir_names_the_variable(tmp_path) -> None:
    with pytest.raises(ValueError, match="PICOBOT_REPLAY_DIR"):
        build_provider({**BASE, "REPLAY_DIR": str(tmp_path)})
