"""Build the configured provider from the ``PICOBOT`` settings dict (DESIGN §8).

Pure: takes a plain dict (``settings.PICOBOT`` in the app), imports no Django.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from providers.base import LLMProvider
from providers.hooks import ProviderHooks

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_DEFAULT_BASE_URL = "https://api.anthropic.com"


def build_provider(config: dict[str, Any]) -> LLMProvider:
    """The provider ``config`` describes.

    Args:
        config: keys ``LLM_PROVIDER`` (``"openai"``, ``"anthropic"``, ``"replay"`` or ``""`` for
            replay), ``LLM_BASE_URL``, ``LLM_API_KEY``, ``LLM_MODEL``, ``LLM_MAX_TOKENS``,
            ``LLM_THINK_TAGS`` (OpenAI-compatible only), ``LLM_IMPLICIT_THINK_START``, ``LLM_CONNECT_TIMEOUT``,
            ``LLM_FIRST_BYTE_TIMEOUT``, ``LLM_IDLE_TIMEOUT``, ``LLM_MAX_RETRIES``, ``REPLAY_DIR``;
            optional ``REPLAY_EVENT_DELAY`` (seconds), ``LLM_THINKING_BUDGET`` (Anthropic
            thinking tokens; ≥ 1024 and below ``LLM_MAX_TOKENS``), ``LLM_ANTHROPIC_THINK_TAGS``
            (extract ``<think>`` spans from Anthropic text; default off: the native API sends
            thinking blocks), ``LLM_REPLAY_REASONING`` (OpenAI-compatible: send streamed
            ``reasoning_content`` back on tool-call turns, default on) and ``LLM_HOOKS`` (dotted
            paths ``"pkg.module.install"`` of functions called with the provider's
            :class:`~providers.hooks.ProviderHooks` to register hooks). Missing keys take the
            settings' defaults.

    Returns:
        An unopened provider (no network I/O happens here).

    Raises:
        ValueError: an unknown provider, a missing required setting or a hook installer that
            cannot be imported; the message names the ``PICOBOT_*`` variable to set.
    """
    provider = _build(config)
    for path in config.get("LLM_HOOKS") or ():
        _hook_installer(str(path))(provider.hooks)
    return provider


def _hook_installer(path: str) -> Callable[[ProviderHooks], object]:
    module_name, _, attr = path.strip().replace(":", ".").rpartition(".")
    try:
        installer = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"PICOBOT_LLM_HOOKS: cannot import {path!r} ({exc})") from exc
    if not callable(installer):
        raise ValueError(f"PICOBOT_LLM_HOOKS: {path!r} is not callable")
    return installer


def _build(config: dict[str, Any]) -> LLMProvider:
    kind = str(config.get("LLM_PROVIDER") or "").strip().lower()
    if kind in ("", "replay"):
        from providers.replay import ReplayProvider

        return ReplayProvider(
            config.get("REPLAY_DIR") or None, event_delay=float(config.get("REPLAY_EVENT_DELAY") or 0.0)
        )
    if kind not in ("openai", "anthropic"):
        raise ValueError(f"PICOBOT_LLM_PROVIDER must be openai, anthropic or replay, got {kind!r}")
    model = str(config.get("LLM_MODEL") or "").strip()
    if not model:
        raise ValueError(f"PICOBOT_LLM_PROVIDER={kind} needs a model: set PICOBOT_LLM_MODEL")
    api_key = str(config.get("LLM_API_KEY") or "").strip()
    default_url = OPENAI_DEFAULT_BASE_URL if kind == "openai" else ANTHROPIC_DEFAULT_BASE_URL
    base_url = str(config.get("LLM_BASE_URL") or "").strip() or default_url
    if not api_key and base_url in (OPENAI_DEFAULT_BASE_URL, ANTHROPIC_DEFAULT_BASE_URL):
        raise ValueError(f"PICOBOT_LLM_PROVIDER={kind} at {base_url} needs a key: set PICOBOT_LLM_API_KEY")
    max_tokens = config.get("LLM_MAX_TOKENS")
    common: dict[str, Any] = {
        "connect_timeout": float(config.get("LLM_CONNECT_TIMEOUT", 10.0)),
        "first_byte_timeout": float(config.get("LLM_FIRST_BYTE_TIMEOUT", 60.0)),
        "idle_timeout": float(config.get("LLM_IDLE_TIMEOUT", 60.0)),
        "max_retries": int(config.get("LLM_MAX_RETRIES", 2)),
        "max_connections": int(config.get("LLM_MAX_CONNECTIONS", 1000)),
        "max_tokens": int(max_tokens) if max_tokens else None,
    }
    if kind == "openai":
        from providers.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider(
            base_url,
            api_key,
            model,
            think_tags=bool(config.get("LLM_THINK_TAGS", True)),
            implicit_think_start=bool(config.get("LLM_IMPLICIT_THINK_START", False)),
            replay_reasoning=bool(config.get("LLM_REPLAY_REASONING", True)),
            **common,
        )
    from providers.anthropic import AnthropicProvider

    budget = config.get("LLM_THINKING_BUDGET")
    return AnthropicProvider(
        base_url,
        api_key,
        model,
        thinking_budget=int(budget) if budget else None,
        think_tags=bool(config.get("LLM_ANTHROPIC_THINK_TAGS", False)),
        **common,
    )
