"""Build the configured provider from a :class:`ProviderConfig` (DESIGN §8).

Pure: the app makes the config from its typed settings (``settings.PICOBOT.provider_config()``);
no Django here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from providers.base import LLMProvider
from providers.config import ProviderConfig
from providers.hooks import ProviderHooks

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_DEFAULT_BASE_URL = "https://api.anthropic.com"


def build_provider(config: ProviderConfig) -> LLMProvider:
    """The provider ``config`` describes.

    Returns:
        An unopened provider (no network I/O happens here).

    Raises:
        ValueError: an unknown provider, a missing required setting or a hook installer that
            cannot be imported; the message names the ``PICOBOT_*`` variable to set.
    """
    provider = _build(config)
    for path in config.hooks:
        installer = _hook_installer(str(path))
        try:
            installer(provider.hooks)
        except (Exception, SystemExit) as exc:  # the operator's code: say which and why, no traceback
            raise ValueError(f"PICOBOT_LLM_HOOKS: {path!r} failed: {type(exc).__name__}: {exc}") from exc
    return provider


def _hook_installer(path: str) -> Callable[[ProviderHooks], object]:
    module_name, _, attr = path.strip().replace(":", ".").rpartition(".")
    if not module_name:
        raise ValueError(f"PICOBOT_LLM_HOOKS: {path!r} is no module.function path (e.g. mypkg.hooks.install)")
    try:
        installer = getattr(importlib.import_module(module_name), attr)
    except (Exception, SystemExit) as exc:  # not found, or the module fails as it loads
        raise ValueError(f"PICOBOT_LLM_HOOKS: cannot import {path!r} ({type(exc).__name__}: {exc})") from exc
    if not callable(installer):
        raise ValueError(f"PICOBOT_LLM_HOOKS: {path!r} is not callable")
    return installer


def _build(config: ProviderConfig) -> LLMProvider:
    kind = config.provider.strip().lower()
    if kind in ("", "replay"):
        from providers.replay import ReplayProvider

        return ReplayProvider(config.replay_dir or None, event_delay=config.replay_event_delay)
    if kind not in ("openai", "anthropic"):
        raise ValueError(f"PICOBOT_LLM_PROVIDER must be openai, anthropic or replay, got {kind!r}")
    model = config.model.strip()
    if not model:
        raise ValueError(f"PICOBOT_LLM_PROVIDER={kind} needs a model: set PICOBOT_LLM_MODEL")
    api_key = config.api_key.strip()
    default_url = OPENAI_DEFAULT_BASE_URL if kind == "openai" else ANTHROPIC_DEFAULT_BASE_URL
    base_url = config.base_url.strip() or default_url
    if not api_key and base_url in (OPENAI_DEFAULT_BASE_URL, ANTHROPIC_DEFAULT_BASE_URL):
        raise ValueError(f"PICOBOT_LLM_PROVIDER={kind} at {base_url} needs a key: set PICOBOT_LLM_API_KEY")
    common: dict[str, Any] = {
        "connect_timeout": config.connect_timeout,
        "first_byte_timeout": config.first_byte_timeout,
        "idle_timeout": config.idle_timeout,
        "max_retries": config.max_retries,
        "max_connections": config.max_connections,
        "max_tokens": config.max_tokens or None,
    }
    if kind == "openai":
        from providers.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider(
            base_url,
            api_key,
            model,
            think_tags=config.think_tags,
            implicit_think_start=config.implicit_think_start,
            replay_reasoning=config.replay_reasoning,
            **common,
        )
    from providers.anthropic import AnthropicProvider

    return AnthropicProvider(
        base_url,
        api_key,
        model,
        thinking_budget=config.thinking_budget or None,
        think_tags=config.anthropic_think_tags,
        **common,
    )
