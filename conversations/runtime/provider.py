"""Process-wide runtime objects: the configured LLM provider and the tool registry.

Built lazily from ``settings.PICOBOT`` (DESIGN §8); tests swap the provider with
``set_provider()``. No network I/O happens at build time.
"""

from __future__ import annotations

from django.conf import settings

from providers.base import LLMProvider

_provider: LLMProvider | None = None


def get_provider() -> LLMProvider:
    """The process's provider (built on first use; raises ValueError on bad configuration)."""
    global _provider
    if _provider is None:
        from providers.factory import build_provider

        _provider = build_provider(settings.PICOBOT.provider_config())
    return _provider


def set_provider(provider: LLMProvider | None) -> None:
    """Replace the process's provider (tests; ``None`` rebuilds from settings on next use)."""
    global _provider
    _provider = provider


def provider_info() -> dict:
    """``{name, model, offline}`` for the ``ready`` frame and the WebUI (PROTOCOL §1)."""
    provider = get_provider()
    return {"name": provider.name, "model": provider.model, "offline": bool(provider.offline)}
