"""Process-wide runtime objects: the model presets and their providers.

The catalog comes from ``PICOBOT_CONFIG`` (``providers.presets``; without the file the
``PICOBOT_LLM_*`` settings are the preset ``default``); each preset's provider is built lazily on
first use and wrapped in a ``MeteredProvider`` (usage rows, metrics). Tests swap every preset's
provider with ``set_provider()``. No network I/O happens at build time.
"""

from __future__ import annotations

import logging
import os
import tomllib
from typing import Protocol

from django.conf import settings

from providers.base import LLMProvider
from providers.fallback import FallbackProvider, OnSwitch, falls_back
from providers.metering import MeteredProvider
from providers.presets import ModelPreset, PresetCatalog, load_catalog

log = logging.getLogger(__name__)


class ProviderFor(Protocol):
    """A preset's name → its (metered) provider (``get_provider``, ``AgentWorker.provider_for``)."""

    def __call__(self, preset: str, *, before_fallback: bool = False) -> LLMProvider: ...


_override: LLMProvider | None = None
_overrides: dict[str, LLMProvider] = {}
_providers: dict[tuple[str, bool], LLMProvider] = {}
_catalog: PresetCatalog | None = None
_catalog_settings: object = None


def model_catalog() -> PresetCatalog:
    """The deployment's presets: :func:`read_catalog` once per settings object (``reset()``
    reads again). A new ``settings.PICOBOT`` (tests replace it) reads again and forgets the
    providers built from the old one, so a window or provider setting changed there applies.

    Raises:
        ValueError: as :func:`read_catalog`.
    """
    global _catalog, _catalog_settings
    config = settings.PICOBOT
    if _catalog is None or _catalog_settings is not config:
        _catalog, _catalog_settings = read_catalog(), config
        _providers.clear()
    return _catalog


def read_catalog() -> PresetCatalog:
    """The presets as ``PICOBOT_CONFIG`` and the settings describe them now (reads the file; not
    cached: ``doctor`` checks with it without touching the process's catalog).

    Raises:
        ValueError: the file cannot be read or parsed, or describes bad presets (the message
            names ``PICOBOT_CONFIG``, the table and the key).
    """
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
    return load_catalog(
        document,
        base=config.provider_config(),
        context_window=config.llm_context_window,
        environ=os.environ,
    )


def preset_for(name: str | None) -> ModelPreset:
    """The preset ``name`` (blank: the default; a removed one: the default too)."""
    return model_catalog().resolve(name)


def get_provider(preset: str | None = None, *, before_fallback: bool = False) -> LLMProvider:
    """The provider of ``preset`` (blank: the default preset), built on first use.

    ``before_fallback``: the provider for a place in a fallback chain with a preset after it: a
    separate instance whose HTTP layer does not retry what the next preset takes
    (``providers.fallback``: a 429 falls back at once; issue 17).

    Raises:
        ValueError: bad configuration (the message names the setting or the preset's key).
    """
    chosen = preset_for(preset)
    key = (chosen.name, before_fallback)
    provider = _providers.get(key)
    if provider is None:
        inner = _overrides.get(chosen.name, _override)
        if inner is None:
            from providers.factory import build_provider

            if chosen.key_missing:
                raise ValueError(f"model preset {chosen.name!r}: {chosen.key_problem}")
            inner = build_provider(chosen.config)
            if before_fallback and hasattr(inner, "retry_elsewhere"):
                inner.retry_elsewhere = falls_back
        provider = _providers[key] = MeteredProvider(inner, chosen.name)
    return provider


def turn_provider(
    preset: str, provider_for: ProviderFor = get_provider, on_switch: OnSwitch | None = None
) -> LLMProvider:
    """What a turn on ``preset`` streams from: the preset's provider, or a
    :class:`~providers.fallback.FallbackProvider` over its chain when it names fallbacks.

    A fallback whose key is missing is left out of the chain (logged); ``provider_for`` is the
    worker's (``TurnContext.provider_for``), ``on_switch`` is awaited before each fallback.
    """
    chain = []
    for index, step in enumerate(model_catalog().chain(preset)):
        if index and step.key_missing:
            log.warning(
                "model preset %s: fallback %s left out: $%s is not set", preset, step.name, step.api_key_env
            )
            continue
        chain.append(step.name)
    if len(chain) == 1:
        return provider_for(chain[0])
    last = len(chain) - 1
    steps = [(name, provider_for(name, before_fallback=index < last)) for index, name in enumerate(chain)]
    return FallbackProvider(steps, on_switch)


def set_provider(provider: LLMProvider | None, *, preset: str | None = None) -> None:
    """Make ``provider`` every preset's provider, metered under each preset's name (tests);
    ``None`` builds from settings again. With ``preset``, only that preset's (``None`` undoes
    it); without, every per-preset choice is forgotten too."""
    global _override
    if preset is None:
        _override = provider
        _overrides.clear()
    elif provider is None:
        _overrides.pop(preset, None)
    else:
        _overrides[preset] = provider
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
