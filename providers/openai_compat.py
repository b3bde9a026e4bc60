"""OpenAI-compatible Chat Completions provider (OpenAI, DeepSeek, OpenRouter, vLLM, Ollama…).

Streams ``POST {base_url}/chat/completions`` (``base_url`` includes ``/v1``, as in the official
SDK). The wire mapping is in :mod:`providers._openai_request` and :mod:`providers._openai_stream`;
connection handling, timeouts, retries and HTTP error mapping in :mod:`providers._http`.
"""

from __future__ import annotations

from typing import Any

import httpx2

from providers._http import DEFAULT_MAX_CONNECTIONS, HTTPStreamProvider
from providers._openai_request import build_chat_request
from providers._openai_stream import OpenAIStreamParser
from providers._stream_base import StreamParser
from providers.types import ProviderRequest


class OpenAICompatProvider(HTTPStreamProvider):
    """A streaming OpenAI-compatible chat model.

    Args:
        base_url: API root including ``/v1`` (e.g. ``https://api.openai.com/v1``).
        api_key: bearer token; ``""`` sends no ``Authorization`` header (local servers).
        model: model id.
        think_tags: turn inline ``<think>``/``<thought>``/``<reasoning>`` spans into reasoning.
        implicit_think_start: content starts inside a think span (models whose template
            pre-fills ``<think>``: SC-02).
        connect_timeout: seconds to connect.
        first_byte_timeout: seconds from sending the request to the first body byte.
        idle_timeout: seconds allowed between body reads.
        max_retries: extra attempts for retryable failures before any output (0 = none).
        max_tokens: default output cap when the request sets none (None = provider default).
        transport: httpx2 transport (tests), or None for the network.
        retry_backoff: first backoff (s) without ``retry-after``; doubles per attempt.
        max_connections: concurrent upstream connections; a turn waits for a free one.
        max_retry_delay: cap (s) on one wait between attempts.
        name: provider name, also the ``provider`` key of replay state (``"openai"``); with
            the normalised ``base_url`` (:attr:`endpoint`) it is the replay identity.
        extra_headers: sent with every request (e.g. OpenRouter's ``HTTP-Referer``).
        replay_reasoning: send the ``reasoning_content`` a response streamed back on its
            assistant tool-call message in later requests (DeepSeek thinking mode and Kimi
            answer 400 without it); turn off for servers that reject the field.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        *,
        think_tags: bool = True,
        implicit_think_start: bool = False,
        connect_timeout: float = 10.0,
        first_byte_timeout: float = 60.0,
        idle_timeout: float = 60.0,
        max_retries: int = 2,
        max_tokens: int | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        retry_backoff: float = 0.5,
        max_retry_delay: float = 60.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        name: str = "openai",
        extra_headers: dict[str, str] | None = None,
        replay_reasoning: bool = True,
    ) -> None:
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
        self.replay_reasoning = replay_reasoning
        self._api_key = api_key
        self._extra_headers = dict(extra_headers or {})

    def __repr__(self) -> str:
        return f"OpenAICompatProvider(base_url={self.display_url!r}, model={self.model!r})"  # never the key

    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "text/event-stream", **self._extra_headers}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    def build_body(self, request: ProviderRequest) -> dict[str, Any]:
        """The Chat Completions JSON body for ``request`` (pure; see :mod:`providers._openai_request`).

        ``reasoning_content`` goes back only on assistant tool-call messages whose
        ``provider_state`` this provider (same ``name`` and :attr:`endpoint`) produced after
        streaming that field, and only while :attr:`replay_reasoning` is on (seed 003 §6.2:
        never to another provider, e.g. DeepSeek's reasoning never to OpenAI).
        """
        max_tokens = request.max_tokens if request.max_tokens is not None else self.max_tokens
        body = build_chat_request(
            request, model=self.model, max_tokens=max_tokens, provider_name=self.name, endpoint=self.endpoint
        )
        if not self.replay_reasoning:
            for message in body["messages"]:
                message.pop("reasoning_content", None)
        return body

    def _new_parser(self) -> StreamParser:
        return OpenAIStreamParser(
            provider_name=self.name,
            endpoint=self.endpoint,
            think_tags=self.think_tags,
            implicit_think_start=self.implicit_think_start,
        )
