"""Hand-written SSE bodies through the real providers over httpx2.MockTransport.

``all_modes`` reads a body whole, one read per event and one byte at a time (the three delivery
modes of the cases); ``_transport`` serves responses in order; ``oc`` builds an OpenAI chunk and
``MS``/``bs``/``bd``/``st``/``md``/``MSTOP`` the Anthropic events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2

from providers.anthropic import AnthropicProvider
from providers.chunks import ProviderChunk, TextDelta
from providers.openai_compat import OpenAICompatProvider
from providers.testing import split_events, split_every
from providers.types import AssistantResponse
from tests.providers._cases import run_stream

SSE = {"content-type": "text/event-stream"}
KEY = "sk-SECRETKEY1234567"


def _transport(responses: list[tuple[int, dict[str, str], Any]]) -> httpx2.MockTransport:
    """Serves ``responses`` in order (the last one again); a body is a list of pieces or an
    async-iterator factory."""
    served = [0]

    def handler(request: httpx2.Request) -> httpx2.Response:
        status, headers, body = responses[min(served[0], len(responses) - 1)]
        served[0] += 1
        if callable(body):
            return httpx2.Response(status, headers=headers, content=body())

        async def pieces() -> AsyncIterator[bytes]:
            for piece in body:
                yield piece

        return httpx2.Response(status, headers=headers, content=pieces())

    return httpx2.MockTransport(handler)


def _provider(vendor: str, transport: httpx2.MockTransport, **kwargs: Any):
    kwargs.setdefault("max_retries", 0)
    if vendor == "anthropic":
        return AnthropicProvider("http://provider.test", KEY, "claude-test", transport=transport, **kwargs)
    return OpenAICompatProvider("http://provider.test/v1", KEY, "test-model", transport=transport, **kwargs)


async def all_modes(
    body: bytes, vendor: str = "openai", **kwargs: Any
) -> list[tuple[str, AssistantResponse, list[ProviderChunk]]]:
    out = []
    modes = {"whole": [body], "per-event": split_events(body), "1-byte": split_every(body, 1)}
    for mode, pieces in modes.items():
        provider = _provider(vendor, _transport([(200, SSE, pieces)]), **kwargs)
        result, chunks = await run_stream(provider)
        out.append((mode, result, chunks))
    return out


def oc(delta: dict | None = None, finish: str | None = None) -> dict:
    return {"id": "x", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


ROLE = oc({"role": "assistant", "content": ""})
MS = ("message_start", {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3}}})
MSTOP = ("message_stop", {"type": "message_stop"})


def bs(i: int, block: dict) -> tuple[str, dict]:
    return ("content_block_start", {"type": "content_block_start", "index": i, "content_block": block})


def bd(i: int, delta: dict) -> tuple[str, dict]:
    return ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})


def st(i: int) -> tuple[str, dict]:
    return ("content_block_stop", {"type": "content_block_stop", "index": i})


def md(reason: str) -> tuple[str, dict]:
    return (
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 2}},
    )


def texts(chunks: list[ProviderChunk]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))
