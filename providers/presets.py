"""Model presets: named provider configurations an operator offers, with prices and fallbacks.

A deployment's presets come from the ``[models.NAME]`` tables of the ``PICOBOT_CONFIG`` TOML file
(README "Model presets"); without that file, the ``PICOBOT_LLM_*`` settings are the one preset
``default``. :func:`load_catalog` validates the file's parsed document into a
:class:`PresetCatalog`; a bad file raises ``ValueError`` naming the table and key. Pure: no
Django, no I/O (the caller reads the file and passes the environment).

Prices are per million tokens, in whatever currency the operator writes them; cost follows the
issue's rule (input tokens include cached ones, as OpenAI reports them)::

    cost = ((input − cached) × price_input + cached × price_cached + output × price_output) / 1e6
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from providers.config import ProviderConfig

DEFAULT_PRESET = "default"
"""The preset the ``PICOBOT_LLM_*`` settings make when no ``[models]`` table exists."""

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""A preset name: what ``/model NAME`` accepts (no spaces; at most 64 characters)."""

PRESET_KEYS = frozenset(
    {
        "provider",
        "base_url",
        "model",
        "api_key_env",
        "context_window",
        "max_tokens",
        "price_input",
        "price_output",
        "price_cached",
        "fallbacks",
        "vision",
        "reasoning",
        "thinking_budget",
        "description",
    }
)
"""The keys a ``[models.NAME]`` table may hold (any other is refused as a likely typo)."""

TOP_LEVEL_KEYS = frozenset({"models", "default_model", "mcp_servers"})
"""What the file may hold outside its ``[models.NAME]`` tables (any other key is refused);
``[mcp_servers]`` is read by ``conversations.tools.mcp.config``."""

MILLION = Decimal(1_000_000)


def display_url(url: str) -> str:
    """``url`` without userinfo (passwords), query (``?api-key=``) or fragment: what the REST
    API, the admin and ``doctor`` show of a base URL."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


@dataclass(frozen=True, slots=True)
class ModelPreset:
    """One named model configuration.

    Attributes:
        name: what users pick with ``/model NAME``.
        config: what :func:`providers.factory.build_provider` builds (key resolved from
            ``api_key_env``; timeouts, retries and hooks from the ``PICOBOT_LLM_*`` settings).
        context_window: the model's window in tokens (what the turn input is fitted to).
        api_key_env: the environment variable holding the key ("" for the default preset,
            whose key is ``PICOBOT_LLM_API_KEY``).
        price_input, price_output, price_cached: per million tokens (``Decimal``, ≥ 0).
        fallbacks: presets tried in order when this one cannot answer (``fallback`` module).
        vision: the model reads images; reasoning: it streams reasoning.
        description: a line shown by ``/model`` and the admin.
        key_missing: ``api_key_env`` names a variable that is not set, or the preset calls the
            vendor's public endpoint (no ``base_url``) without ``api_key_env``: it cannot be built.
    """

    name: str
    config: ProviderConfig
    context_window: int
    api_key_env: str = ""
    price_input: Decimal = Decimal(0)
    price_output: Decimal = Decimal(0)
    price_cached: Decimal = Decimal(0)
    fallbacks: tuple[str, ...] = ()
    vision: bool = True
    reasoning: bool = False
    description: str = ""
    key_missing: bool = False

    @property
    def key_problem(self) -> str:
        """Why the preset has no key ("" when it has one or needs none): names what to set."""
        if not self.key_missing:
            return ""
        if self.api_key_env:
            return f"${self.api_key_env} is not set (its api_key_env)"
        return f"it calls the vendor's public endpoint without a key: set [models.{self.name}].api_key_env"

    @property
    def label(self) -> str:
        """``"NAME (provider model)"`` for notices and ``/info``."""
        kind = self.config.provider or "replay"
        return f"{self.name} ({kind} {self.config.model})" if self.config.model else f"{self.name} ({kind})"

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> Decimal:
        """What a call with these token counts costs (module docstring); cached ≤ input."""
        cached = min(max(0, cached_tokens), max(0, input_tokens))
        return (
            (max(0, input_tokens) - cached) * self.price_input
            + cached * self.price_cached
            + max(0, output_tokens) * self.price_output
        ) / MILLION

    def public(self) -> dict[str, Any]:
        """The preset as the REST API and admin show it: no key, no key variable's value."""
        return {
            "name": self.name,
            "provider": self.config.provider or "replay",
            "base_url": display_url(self.config.base_url),
            "model": self.config.model,
            "context_window": self.context_window,
            "max_tokens": self.config.max_tokens,
            "price_input": float(self.price_input),
            "price_output": float(self.price_output),
            "price_cached": float(self.price_cached),
            "fallbacks": list(self.fallbacks),
            "vision": self.vision,
            "reasoning": self.reasoning,
            "description": self.description,
            "available": not self.key_missing,
        }


@dataclass(frozen=True, slots=True)
class PresetCatalog:
    """The deployment's presets, in the order the file lists them, and the default's name.

    ``from_file`` is True when the presets came from a ``[models]`` table (the ``PICOBOT_LLM_*``
    settings are then unused: ``doctor`` says so).
    """

    presets: Mapping[str, ModelPreset]
    default: str
    from_file: bool = False

    def get(self, name: str | None) -> ModelPreset:
        """The preset ``name``; blank or None is the default.

        Raises:
            KeyError: no preset of that name (the message lists the names there are).
        """
        key = (name or "").strip() or self.default
        try:
            return self.presets[key]
        except KeyError:
            raise KeyError(f"no model preset {key!r} (there are: {', '.join(self.presets)})") from None

    def resolve(self, name: str | None) -> ModelPreset:
        """The preset ``name``, or the default when it no longer exists (a dialog's choice that
        the operator removed: its next turn uses the default rather than failing)."""
        try:
            return self.get(name)
        except KeyError:
            return self.presets[self.default]

    def chain(self, name: str | None) -> list[ModelPreset]:
        """The preset and its fallbacks in the order they are tried (each once)."""
        first = self.resolve(name)
        chain = [first]
        for fallback in first.fallbacks:
            preset = self.presets[fallback]
            if preset not in chain:
                chain.append(preset)
        return chain

    def names(self) -> list[str]:
        return list(self.presets)


def catalog_from_settings(base: ProviderConfig, context_window: int) -> PresetCatalog:
    """The one preset ``default`` made of the ``PICOBOT_LLM_*`` settings."""
    preset = ModelPreset(DEFAULT_PRESET, base, context_window)
    return PresetCatalog({DEFAULT_PRESET: preset}, DEFAULT_PRESET, from_file=False)


def load_catalog(
    document: Mapping[str, Any],
    *,
    base: ProviderConfig,
    context_window: int,
    environ: Mapping[str, str],
    source: str = "PICOBOT_CONFIG",
) -> PresetCatalog:
    """The catalog a parsed ``PICOBOT_CONFIG`` document describes.

    Without a ``[models]`` table it is :func:`catalog_from_settings`. Each ``[models.NAME]``
    table inherits what it does not set from ``base`` (the ``PICOBOT_LLM_*`` settings: timeouts,
    retries, think tags, hooks) except the key, which comes only from ``api_key_env``.

    Raises:
        ValueError: ``"{source}: [models.NAME].key: …"`` for a bad name, unknown key, wrong type,
            unknown provider, missing model, unknown fallback or default.
    """
    unknown = sorted(set(document) - TOP_LEVEL_KEYS)
    if unknown:
        raise ValueError(f"{source}: unknown key {unknown[0]!r} (known: {', '.join(sorted(TOP_LEVEL_KEYS))})")
    models = document.get("models")
    if models is None:
        if "default_model" in document and document["default_model"] != DEFAULT_PRESET:
            raise ValueError(
                f"{source}: default_model names {document['default_model']!r} but there is no [models] table"
            )
        return catalog_from_settings(base, context_window)
    if not isinstance(models, Mapping) or not models:
        raise ValueError(f"{source}: [models] must hold at least one [models.NAME] table")
    presets: dict[str, ModelPreset] = {}
    for name, table in models.items():
        presets[name] = _preset(name, table, base, context_window, environ, source)
    for preset in presets.values():
        for fallback in preset.fallbacks:
            if fallback not in presets:
                raise ValueError(f"{source}: [models.{preset.name}].fallbacks: no preset {fallback!r}")
            if fallback == preset.name:
                raise ValueError(
                    f"{source}: [models.{preset.name}].fallbacks: a preset cannot fall back to itself"
                )
    default = document.get("default_model", next(iter(presets)))
    if not isinstance(default, str) or default not in presets:
        raise ValueError(f"{source}: default_model = {default!r} is not one of {', '.join(presets)}")
    return PresetCatalog(presets, default, from_file=True)


def _preset(
    name: Any,
    table: Any,
    base: ProviderConfig,
    context_window: int,
    environ: Mapping[str, str],
    source: str,
) -> ModelPreset:
    where = f"{source}: [models.{name}]"
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ValueError(
            f"{where}: a name is 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if not isinstance(table, Mapping):
        raise ValueError(f"{where} must be a table")
    unknown = sorted(set(table) - PRESET_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(PRESET_KEYS))})")
    kind = _text(table, "provider", where, "").lower()
    if kind not in ("openai", "anthropic", "replay"):
        raise ValueError(f'{where}.provider must be "openai", "anthropic" or "replay", got {kind!r}')
    model = _text(table, "model", where, "")
    if kind != "replay" and not model:
        raise ValueError(f"{where}.model is required for provider {kind!r}")
    key_env = _text(table, "api_key_env", where, "")
    if key_env and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key_env):
        raise ValueError(f"{where}.api_key_env must name an environment variable, got {key_env!r}")
    api_key = environ.get(key_env, "").strip() if key_env else ""
    if api_key and any(ord(c) < 0x20 or ord(c) == 0x7F for c in api_key):
        raise ValueError(f"{where}.api_key_env: ${key_env} holds control characters (not a header value)")
    max_tokens = _integer(table, "max_tokens", where, base.max_tokens or 0, minimum=1)
    config = dataclasses.replace(
        base,
        provider=kind,
        base_url=_text(table, "base_url", where, ""),
        api_key=api_key,
        model=model,
        max_tokens=max_tokens or None,
        thinking_budget=_integer(table, "thinking_budget", where, 0, minimum=0),
    )
    base_url = config.base_url
    if base_url and not re.match(r"^https?://[^\s/]+", base_url):
        raise ValueError(f"{where}.base_url must be an http(s) URL, got {base_url!r}")
    window = _integer(table, "context_window", where, context_window, minimum=1)
    if max_tokens and max_tokens >= window:
        origin = "" if "max_tokens" in table else ", from PICOBOT_LLM_MAX_TOKENS"
        raise ValueError(
            f"{where}.max_tokens ({max_tokens}{origin}) must be below context_window ({window}): the "
            "answer's budget comes out of the window"
        )
    fallbacks = table.get("fallbacks", [])
    if not isinstance(fallbacks, list) or not all(isinstance(item, str) for item in fallbacks):
        raise ValueError(f"{where}.fallbacks must be a list of preset names")
    return ModelPreset(
        name=name,
        config=config,
        context_window=window,
        api_key_env=key_env,
        price_input=_price(table, "price_input", where),
        price_output=_price(table, "price_output", where),
        price_cached=_price(table, "price_cached", where, default=table.get("price_input", 0)),
        fallbacks=tuple(dict.fromkeys(fallbacks)),
        vision=_flag(table, "vision", where, True),
        reasoning=_flag(table, "reasoning", where, False),
        description=_text(table, "description", where, ""),
        # A preset at the vendor's public endpoint needs a key too (the factory refuses it keyless).
        key_missing=not api_key and (bool(key_env) or (kind != "replay" and not base_url)),
    )


def _text(table: Mapping[str, Any], key: str, where: str, default: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"{where}.{key} must be a string, got {value!r}")
    return value.strip()


def _integer(table: Mapping[str, Any], key: str, where: str, default: int, *, minimum: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or (key in table and value < minimum):
        raise ValueError(f"{where}.{key} must be an integer ≥ {minimum}, got {value!r}")
    return value


def _flag(table: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{where}.{key} must be true or false, got {value!r}")
    return value


def _price(table: Mapping[str, Any], key: str, where: str, *, default: Any = 0) -> Decimal:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}.{key} must be a number (per million tokens), got {value!r}")
    try:
        price = Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"{where}.{key} must be a number, got {value!r}") from None
    if not price.is_finite() or price < 0:
        raise ValueError(f"{where}.{key} must be a finite number ≥ 0, got {value!r}")
    return price
