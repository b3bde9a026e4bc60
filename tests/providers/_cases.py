"""Loading and running the stream cases of ``tests/cases`` (see tests/cases/*/README.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from providers._http import HTTPStreamProvider
from providers.anthropic import AnthropicProvider
from providers.base import StreamAccumulator
from providers.chunks import ProviderChunk
from providers.errors import ProviderError
from providers.messages import Message
from providers.openai_compat import OpenAICompatProvider
from providers.testing import split_events, split_every
from providers.types import AssistantResponse, ProviderRequest

CASES_DIR = Path(__file__).resolve().parent.parent / "cases"
ANTHROPIC_CASES = frozenset({"SC-22", "SC-23", "SC-25", "SC-27", "RC-09", "RC-10", "RC-12"})
HTTP_TRANSCRIPTS = frozenset({"SC-20", "SC-21"})
IMPLICIT_THINK_START = frozenset({"SC-02"})
EXTRA_SPLITS = {"SC-13": (332, 519)}


@dataclass
class Case:
    """One case: the HTTP response to serve and the expected normalised result."""

    id: str
    status: int
    headers: dict[str, str]
    body: bytes
    expected: dict[str, Any]

    @property
    def anthropic(self) -> bool:
        return self.id in ANTHROPIC_CASES


def case_ids() -> list[str]:
    """Every case id, streams first (SC-XX), then real recordings (RC-XX)."""
    return [
        p.name.removesuffix(".sse")
        for folder in ("streams", "real")
        for p in sorted((CASES_DIR / folder).glob("*.sse"))
    ]


def _path(case_id: str, suffix: str) -> Path:
    folder = "real" if case_id.startswith("RC-") else "streams"
    return CASES_DIR / folder / f"{case_id}{suffix}"


def load_case(case_id: str) -> Case:
    """Read ``<id>.sse`` (a raw body, or an HTTP transcript for SC-20/21) and its expectation."""
    raw = _path(case_id, ".sse").read_bytes()
    expected = json.loads(_path(case_id, ".expected.json").read_text(encoding="utf-8"))
    if case_id not in HTTP_TRANSCRIPTS:
        return Case(case_id, 200, {"content-type": "text/event-stream"}, raw, expected)
    head, _, body = raw.partition(b"\n\n")
    status_line, *header_lines = head.decode("latin-1").splitlines()
    headers = {}
    for line in header_lines:
        key, _, value = line.partition(":")
        if key.strip().lower() != "content-length":  # recomputed by the mock
            headers[key.strip().lower()] = value.strip()
    return Case(case_id, int(status_line.split()[1]), headers, body, expected)


def delivery_modes(case: Case) -> dict[str, list[bytes]]:
    """The ways each body is read: whole, one read per event, 1-byte reads (+ case offsets)."""
    modes = {"whole": [case.body], "per-event": split_events(case.body), "1-byte": split_every(case.body, 1)}
    if case.id in EXTRA_SPLITS:
        cuts = (0, *EXTRA_SPLITS[case.id], len(case.body))
        modes["offsets"] = [case.body[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    return modes


def mock_transport(status: int, headers: dict[str, str], pieces: list[bytes]) -> httpx2.MockTransport:
    """A transport answering every request with ``status`` and a body streamed in ``pieces``."""

    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, headers=headers, content=body())

    return httpx2.MockTransport(handler)


def make_provider(
    case_id: str, *, base_url: str = "http://provider.test/v1", **kwargs: Any
) -> HTTPStreamProvider:
    """The provider a case is written for, with no retries (the cases test one response)."""
    kwargs.setdefault("max_retries", 0)
    if case_id in ANTHROPIC_CASES:
        return AnthropicProvider(base_url.removesuffix("/v1"), "test-key", "claude-test", **kwargs)
    return OpenAICompatProvider(
        base_url, "test-key", "test-model", implicit_think_start=case_id in IMPLICIT_THINK_START, **kwargs
    )


REQUEST = ProviderRequest([Message.system("You are terse."), Message.user("Hi")])


async def run_stream(provider: HTTPStreamProvider) -> tuple[AssistantResponse, list[ProviderChunk]]:
    """Stream one request; returns the accumulated result (partial on failure) and the chunks."""
    acc = StreamAccumulator()
    chunks: list[ProviderChunk] = []
    try:
        async for chunk in provider.stream(REQUEST):
            chunks.append(chunk)
            acc.feed(chunk)
    except ProviderError as exc:
        acc.fail(exc)
    finally:
        await provider.aclose()
    return acc.result(), chunks


def normalise(result: AssistantResponse) -> dict[str, Any]:
    """The six keys of ``expected.json``."""
    return {
        "text": result.text,
        "reasoning": result.reasoning or "",
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments_json} for c in result.tool_calls
        ],
        "usage": result.usage.to_dict() if result.usage else None,
        "finish_reason": result.finish_reason,
        "error": result.error.to_dict() if result.error else None,
    }


def assert_matches(actual: dict[str, Any], expected: dict[str, Any], where: str) -> None:
    """Compare per the README rules (strip text/reasoning, json.loads arguments, message substring)."""
    assert actual["text"].strip() == expected["text"].strip(), where
    assert actual["reasoning"].strip() == expected["reasoning"].strip(), where
    got_calls = [(c["id"], c["name"], json.loads(c["arguments"])) for c in actual["tool_calls"]]
    want_calls = [(c["id"], c["name"], json.loads(c["arguments"])) for c in expected["tool_calls"]]
    assert got_calls == want_calls, where
    assert actual["usage"] == expected["usage"], where
    assert actual["finish_reason"] == expected["finish_reason"], where
    if expected["error"] is None:
        assert actual["error"] is None, f"{where}: unexpected error {actual['error']}"
        return
    assert actual["error"] is not None, f"{where}: expected an error"
    for key in ("kind", "http_status", "provider_code", "retry_after_s"):
        assert actual["error"][key] == expected["error"][key], f"{where}: error.{key}"
    if expected["error"]["kind"] != "truncated":
        assert expected["error"]["message"] in actual["error"]["message"], where


ProviderFactory = Callable[[list[bytes]], HTTPStreamProvider]
