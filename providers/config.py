"""What a provider is configured with: :class:`ProviderConfig` (a leaf module: imports nothing).

The app builds it from its typed settings (``settings.PICOBOT.provider_config()``, README
"Configuration"); :func:`providers.factory.build_provider` turns it into a provider.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """One provider's configuration; each field is the ``PICOBOT_LLM_*`` / ``PICOBOT_REPLAY_*``
    variable of the same name (README, Configuration), with the same default except
    ``replay_event_delay`` (0 here: no pause, for tests and direct use)."""

    provider: str = "replay"
    """``openai``, ``anthropic`` or ``replay`` (also ``""``)."""
    base_url: str = ""
    """Blank: the provider's public endpoint."""
    api_key: str = ""
    model: str = ""
    max_tokens: int | None = 4096
    think_tags: bool = True
    """OpenAI-compatible: inline ``<think>`` spans become reasoning."""
    anthropic_think_tags: bool = False
    """Anthropic: the same (off: the native API sends thinking blocks)."""
    implicit_think_start: bool = False
    connect_timeout: float = 10.0
    first_byte_timeout: float = 60.0
    idle_timeout: float = 60.0
    max_retries: int = 2
    max_connections: int = 1000
    thinking_budget: int = 0
    """Anthropic thinking tokens (0 = off; else ≥ 1024 and below ``max_tokens``)."""
    replay_reasoning: bool = True
    """OpenAI-compatible: send streamed ``reasoning_content`` back on tool-call turns."""
    hooks: tuple[str, ...] = ()
    """Dotted paths ``"pkg.module.install"`` of functions called with the provider's
    :class:`~providers.hooks.ProviderHooks` to register hooks."""
    replay_dir: str = ""
    """Blank: the transcripts shipped in ``providers/transcripts``."""
    replay_event_delay: float = 0.0
    """Seconds between replayed stream events."""
