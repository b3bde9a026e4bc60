"""Process-wide runtime objects: the model presets and their providers.

The catalog comes from ``PICOBOT_CONFIG`` (``providers.presets``; without the file the
``PICOBOT_LLM_*`` settings are the preset ``default``); each preset's provider is built lazily on
first use and wrapped in a ``MeteredProvider`` (usage rows, metrics). Tests swap every preset's
provider with ``set_provider()``. No network I/O happens at build time.
"""

from __future__ import annotations

import os
import tomllib

from django.conf import settings

from providers.base import LLMProvider
from providers.metering import MeteredProvider
from providers.presets import ModelPreset, PresetCatalog, load_catalog

_override: LLMProvider | None = None
_providers: dict[str, LLMProvider] = {}
_catalog: PresetCatalog | None = None


def model_catalog() -> PresetCatalog:
    """The deployment's presets (read once; ``reset()`` reads again).

    Raises:
        ValueError: the file cannot be read or parsed, or describes bad presets (the message
            names ``PICOBOT_CONFIG``, the table and the key).
    """
    global _catalog
    if _catalog is None:
        config = settings.PICOBOT
        document: dict = {}
        if config.config is not None:
            try:
                with open(config.config, "rb") as handle:
                    document = tomllib.load(handle)
            except OSError as exc:
                raise ValueError(f"PICOBOT_CONFIG={config.config}: cannot read it ({exc.strerror})") from None
            except tomllib.TOMLDecodeError as exc:
                raise ValueError(f"PICOBOT_CONFIG={config.config}: not valid TOML ({exc})") from None
        _catalog = load_catalog(
            document,
            base=config.provider_config(),
            context_window=config.llm_context_window,
            environ=os.environ,
        )
    return _catalog


def preset_for(name: str | None) -> ModelPreset:
    """The preset ``name`` (blank: the default; a removed one: the default too)."""
    return model_catalog().resolve(name)


def get_provider(preset: str | None = None) -> LLMProvider:
    """The provider of ``preset`` (blank: the default preset), built on first use.

    Raises:
        ValueError: bad configuration (the message names the setting or the preset's key).
    """
    chosen = preset_for(preset)
    provider = _providers.get(chosen.name)
    if provider is None and _override is not None:
        provider = _providers[chosen.name] = MeteredProvider(_override, chosen.name)
    elif provider is None:
        from providers.factory import build_provider

        if chosen.key_missing:
            raise ValueError(
                f"model preset {chosen.name!r}: ${chosen.api_key_env} is not set (its api_key_env)"
            )
        provider = _providers[chosen.name] = MeteredProvider(build_provider(chosen.config), chosen.name)
    return provider


def set_provider(provider: LLMProvider | None) -> None:
    """Make ``provider`` every preset's provider, metered under each preset's name (tests);
    ``None`` builds from settings again."""
    global _override
    _override = provider
    _providers.clear()


def reset() -> None:
    """Forget the catalog and the built providers (tests that change ``PICOBOT_CONFIG``)."""
    global _catalog
    _catalog = None
    set_provider(None)


def provider_info() -> dict:
    """``{name, model, offline}`` of the default preset's provider, for the ``ready`` frame and
    the WebUI (PROTOCOL §1)."""
    provider = get_provider()
    return {"name": provider.name, "model": provider.model, "offline": bool(provider.offline)}
