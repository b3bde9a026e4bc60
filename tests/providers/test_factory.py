"""build_provider: the PICOBOT settings dict → a provider, with clear configuration errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from providers.anthropic import AnthropicProvider
from providers.config import ProviderConfig
from providers.factory import build_provider
from providers.openai_compat import OpenAICompatProvider
from providers.replay import ReplayProvider

BASE = ProviderConfig(
    provider="",
    base_url="",
    api_key="",
    model="",
    max_tokens=4096,
    think_tags=True,
    implicit_think_start=False,
    connect_timeout=10.0,
    first_byte_timeout=60.0,
    idle_timeout=60.0,
    max_retries=2,
    replay_dir="",
)


@pytest.mark.parametrize("kind", ["", "replay", "REPLAY"])
def test_no_provider_means_replay(kind: str) -> None:
    provider = build_provider(replace(BASE, provider=kind))
    assert isinstance(provider, ReplayProvider) and provider.offline


def test_openai_takes_every_setting() -> None:
    provider = build_provider(
        replace(
            BASE,
            provider="openai",
            base_url="http://localhost:11434/v1",
            model="qwen3",
            think_tags=False,
            implicit_think_start=True,
            idle_timeout=5.0,
            first_byte_timeout=7.0,
            max_retries=0,
        )
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
    provider = build_provider(replace(BASE, provider="openai", model="gpt-4o-mini", api_key="sk-x"))
    assert provider.base_url == "https://api.openai.com/v1"
    with pytest.raises(ValueError, match="PICOBOT_LLM_API_KEY"):
        build_provider(replace(BASE, provider="openai", model="gpt-4o-mini"))


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_model_is_required(kind: str) -> None:
    with pytest.raises(ValueError, match="PICOBOT_LLM_MODEL"):
        build_provider(replace(BASE, provider=kind, api_key="k"))


def test_anthropic() -> None:
    provider = build_provider(replace(BASE, provider="anthropic", model="claude-sonnet-4-5", api_key="k"))
    assert isinstance(provider, AnthropicProvider)
    assert provider.base_url == "https://api.anthropic.com" and provider.name == "anthropic"


def test_unknown_provider_names_the_variable() -> None:
    with pytest.raises(ValueError, match="PICOBOT_LLM_PROVIDER"):
        build_provider(replace(BASE, provider="gemini"))


def test_a_bad_replay_dir_names_the_variable(tmp_path) -> None:
    with pytest.raises(ValueError, match="PICOBOT_REPLAY_DIR"):
        build_provider(replace(BASE, replay_dir=str(tmp_path)))


def test_factory_turns_think_tags_off_for_anthropic_unless_asked() -> None:
    base = ProviderConfig(provider="anthropic", model="claude", api_key="k", think_tags=True)
    assert build_provider(base).think_tags is False
    assert build_provider(replace(base, anthropic_think_tags=True)).think_tags is True
    assert AnthropicProvider("http://x", "k", "m").think_tags is False


@pytest.mark.parametrize(("budget", "max_tokens"), [(500, None), (4096, None), (8000, 8000), (2000, 1500)])
def test_an_invalid_thinking_budget_is_refused_at_construction(budget, max_tokens) -> None:
    with pytest.raises(ValueError, match="PICOBOT_LLM_THINKING_BUDGET.*PICOBOT_LLM_MAX_TOKENS"):
        AnthropicProvider("http://x", "k", "m", thinking_budget=budget, max_tokens=max_tokens)
    assert AnthropicProvider("http://x", "k", "m", thinking_budget=1024).thinking_budget == 1024
