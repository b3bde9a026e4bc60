"""Anthropic Messages provider (streaming).

Streams ``POST {base}/v1/messages`` with ``x-api-key`` and ``anthropic-version``. The wire
mapping is in :mod:`providers._anthropic_request` and :mod:`providers._anthropic_stream`;
connection handling, timeouts, retries and HTTP error mapping in :mod:`providers._http`.
"""

from __future__ import annotations

from typing import Any

import httpx2

from providers._anthropic_request import DEFAULT_MAX_TOKENS, build_messages_request
from providers._anthropic_stream import AnthropicStreamParser
from providers._http import DEFAULT_MAX_CONNECTIONS, HTTPStreamProvider
from providers._stream_base import StreamParser
from providers.types import ProviderRequest

ANTHROPIC_VERSION = "2023-06-01"
MIN_THINKING_BUDGET = 1024  # the API's minimum budget_tokens


class AnthropicProvider(HTTPStreamProvider):
    """A streaming Anthropic (or Anthropic-compatible) chat model.

    Args:
        base_url: API root without ``/v1`` (``https://api.anthropic.com``; a trailing ``/v1``
            is tolerated).
        api_key: sent as ``x-api-key``.
        model: model id.
        think_tags: also extract inline ``<think>`` spans from text (off by default: the
            native API sends reasoning as thinking blocks, and a literal ``<think>`` in an
            answer is text; turn on for Anthropic-compatible endpoints that leak tags).
        implicit_think_start: text starts inside a think span.
        connect_timeout, first_byte_timeout, idle_timeout, max_retries, transport,
        retry_backoff, max_retry_delay, max_connections: see :class:`providers._http.HTTPStreamProvider`.
        max_tokens: default output cap (the API requires one; 4096 when None).
        thinking_budget: enable extended thinking with this many budget tokens (None or 0 =
            off); must be at least 1024 and below ``max_tokens`` (4096 when None).
        api_version: the ``anthropic-version`` header.
        name: provider name, also the ``provider`` key of replay state; with the normalised
            ``base_url`` (:attr:`endpoint`) it is the replay identity: signed and redacted
            thinking goes back only to the same API (another Anthropic-compatible endpoint
            would reject the signatures).
    """

    name = "anthropic"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        *,
        think_tags: bool = False,
        implicit_think_start: bool = False,
        connect_timeout: float = 10.0,
        first_byte_timeout: float = 60.0,
        idle_timeout: float = 60.0,
        max_retries: int = 2,
        max_tokens: int | None = None,
        thinking_budget: int | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        retry_backoff: float = 0.5,
        max_retry_delay: float = 60.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        api_version: str = ANTHROPIC_VERSION,
        name: str = "anthropic",
    ) -> None:
        if thinking_budget:
            limit = max_tokens or DEFAULT_MAX_TOKENS
            if thinking_budget < MIN_THINKING_BUDGET or thinking_budget >= limit:
                raise ValueError(
                    f"PICOBOT_LLM_THINKING_BUDGET={thinking_budget} must be at least "
                    f"{MIN_THINKING_BUDGET} and below PICOBOT_LLM_MAX_TOKENS ({limit})"
                )
        base_url = base_url.rstrip("/")
        if base_url.endswith("/v1"):
            base_url = base_url[: -len("/v1")]
        super().__init__(
            base_url=base_url,
            model=model,
            connect_timeout=connect_timeout,
            first_byte_timeout=first_byte_timeout,
            idle_timeout=idle_timeout,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            max_retry_delay=max_retry_delay,
            max_connections=max_connections,
            transport=transport,
        )
        self.name = name
        self.think_tags = think_tags
        self.implicit_think_start = implicit_think_start
        self.max_tokens = max_tokens
        self.thinking_budget = thinking_budget
        self.api_version = api_version
        self._api_key = api_key

    def __repr__(self) -> str:
        return f"AnthropicProvider(base_url={self.display_url!r}, model={self.model!r})"  # never the key

    def _url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def _headers(self) -> dict[str, str]:
        return {
            "x-api-key": self._api_key,
            "anthropic-version": self.api_version,
            "accept": "text/event-stream",
        }

    def build_body(self, request: ProviderRequest) -> dict[str, Any]:
        """The Messages JSON body for ``request`` (pure; see :mod:`providers._anthropic_request`)."""
        max_tokens = request.max_tokens if request.max_tokens is not None else self.max_tokens
        return build_messages_request(
            request,
            model=self.model,
            max_tokens=max_tokens,
            provider_name=self.name,
            endpoint=self.endpoint,
            thinking_budget=self.thinking_budget,
        )

    def _new_parser(self) -> StreamParser:
        return AnthropicStreamParser(
            provider_name=self.name,
            endpoint=self.endpoint,
            think_tags=self.think_tags,
            implicit_think_start=self.implicit_think_start,
        )
