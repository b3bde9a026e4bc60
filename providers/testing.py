"""Test helpers for any app's tests: a scripted provider, SSE body builders, a local server.

* :class:`ScriptedProvider`: an :class:`LLMProvider` that plays scripted chunk lists and
  records every request (fake the LLM without HTTP).
* :func:`sse_body`, :func:`openai_events`: build SSE bodies; :func:`split_events`,
  :func:`split_every` cut them into network reads.
* :class:`LocalSSEServer` / :class:`SSEResponse`: a real loopback HTTP server that serves
  scripted (chunked) responses, for end-to-end tests through the real providers.

Nothing here touches the outside network.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from providers._local_server import LocalSSEServer, RecordedRequest, SSEResponse
from providers.base import LLMProvider
from providers.chunks import (
    Done,
    ProviderChunk,
    ReasoningDelta,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
    UsageChunk,
)
from providers.messages import Usage
from providers.types import ProviderRequest

__all__ = [
    "LocalSSEServer",
    "RecordedRequest",
    "SSEResponse",
    "ScriptedProvider",
    "openai_events",
    "script_text",
    "script_tool_call",
    "split_events",
    "split_every",
    "sse_body",
]

Script = Sequence[ProviderChunk | BaseException] | BaseException


class ScriptedProvider(LLMProvider):
    """Plays one scripted response per :meth:`stream` call, in order.

    Args:
        responses: per call, either a list of chunks (an exception inside the list is raised
            at that point, after the chunks before it: a mid-stream failure) or an exception
            (raised before any chunk).
        delay: seconds to sleep before each chunk (to test slow streams and cancellation).
        name, model, offline: the provider attributes.

    Attributes:
        requests: every :class:`ProviderRequest` received, in order.

    Raises (from :meth:`stream`):
        RuntimeError: more calls than scripted responses.
    """

    def __init__(
        self,
        responses: Iterable[Script],
        *,
        delay: float = 0.0,
        name: str = "scripted",
        model: str = "scripted-model",
        offline: bool = False,
    ) -> None:
        self._responses = list(responses)
        self.delay = delay
        self.name = name
        self.model = model
        self.offline = offline
        self.requests: list[ProviderRequest] = []

    def add(self, response: Script) -> None:
        """Append a response to the script."""
        self._responses.append(response)

    async def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        """Yield the next scripted response."""
        self.requests.append(request)
        call = len(self.requests)
        if call > len(self._responses):
            raise RuntimeError(f"ScriptedProvider: no scripted response left for call #{call}")
        script = self._responses[call - 1]
        if isinstance(script, BaseException):
            raise script
        for item in script:
            if self.delay:
                await asyncio.sleep(self.delay)
            if isinstance(item, BaseException):
                raise item
            yield item


def script_text(
    text: str, *, reasoning: str = "", usage: tuple[int, int] | None = (10, 5), finish_reason: str = "stop"
) -> list[ProviderChunk]:
    """Chunks of a plain answer: reasoning and text word by word, usage, ``Done``."""
    chunks: list[ProviderChunk] = [ReasoningDelta(w) for w in _words(reasoning)]
    chunks += [TextDelta(w) for w in _words(text)]
    if usage is not None:
        chunks.append(UsageChunk(Usage(*usage)))
    chunks.append(Done(finish_reason))
    return chunks


def script_tool_call(
    call_id: str,
    name: str,
    arguments: dict[str, Any] | str,
    *,
    text: str = "",
    finish_reason: str = "tool_calls",
) -> list[ProviderChunk]:
    """Chunks of an answer that calls one tool (arguments streamed in two fragments)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    half = len(raw) // 2
    chunks: list[ProviderChunk] = [TextDelta(w) for w in _words(text)]
    chunks += [
        ToolCallStart(0, call_id, name),
        ToolCallArgumentsDelta(0, raw[:half]),
        ToolCallArgumentsDelta(0, raw[half:]),
    ]
    chunks += [UsageChunk(Usage(10, 5)), Done(finish_reason)]
    return chunks


def _words(text: str) -> list[str]:
    out: list[str] = []
    for i, word in enumerate(text.split(" ")):
        piece = word if i == 0 else " " + word
        if piece:
            out.append(piece)
    return out


def sse_body(events: Iterable[dict[str, Any] | str | bytes | tuple[str, Any]]) -> bytes:
    """An SSE body.

    Args:
        events: per event, a dict (``data: <json>``), a str (``data: <str>``, e.g.
            ``"[DONE]"``), a ``(event_name, dict | str)`` tuple (``event:`` + ``data:``, the
            Anthropic shape) or bytes (written verbatim: comments, broken frames).

    Returns:
        UTF-8 bytes, every event ended by a blank line (except verbatim bytes).
    """
    out: list[bytes] = []
    for event in events:
        if isinstance(event, bytes):
            out.append(event)
            continue
        name = None
        if isinstance(event, tuple):
            name, event = event
        data = event if isinstance(event, str) else json.dumps(event, ensure_ascii=False)
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {data}\n\n".encode())
    return b"".join(out)


def openai_events(
    text: str = "",
    *,
    reasoning: str = "",
    tool_calls: Sequence[tuple[str, str, str]] = (),
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = (10, 5),
    model: str = "test-model",
    done: bool = True,
) -> list[dict[str, Any] | str]:
    """Events of a ``chat.completion.chunk`` stream, for :func:`sse_body`.

    Args:
        text: answer text, streamed word by word.
        reasoning: ``reasoning_content`` streamed before the text.
        tool_calls: ``(id, name, arguments_json)`` per call; arguments in two fragments.
        finish_reason: defaults to ``tool_calls`` when there are calls, else ``stop``.
        usage: ``(prompt_tokens, completion_tokens)`` in a trailing ``choices: []`` chunk.
        model: model name in the chunks.
        done: end with ``[DONE]``.
    """

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1750000000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    events: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning_content": w}) for w in _words(reasoning)]
    events += [chunk({"content": w}) for w in _words(text)]
    for index, (call_id, name, arguments) in enumerate(tool_calls):
        half = len(arguments) // 2
        start = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [start]}))
        for fragment in (arguments[:half], arguments[half:]):
            events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}))
    events.append(chunk({}, finish_reason or ("tool_calls" if tool_calls else "stop")))
    if usage is not None:
        events.append(
            {
                "id": "chatcmpl-test",
                "object": "chat.completion.chunk",
                "created": 1750000000,
                "model": model,
                "choices": [],
                "usage": {
                    "prompt_tokens": usage[0],
                    "completion_tokens": usage[1],
                    "total_tokens": sum(usage),
                },
            }
        )
    if done:
        events.append("[DONE]")
    return events


def split_events(body: bytes) -> list[bytes]:
    """``body`` cut after every blank line (one read per SSE event); a partial tail is kept."""
    pieces: list[bytes] = []
    start = 0
    while True:
        end = body.find(b"\n\n", start)
        if end == -1:
            break
        pieces.append(body[start : end + 2])
        start = end + 2
    if start < len(body):
        pieces.append(body[start:])
    return pieces


def split_every(body: bytes, size: int = 1) -> list[bytes]:
    """``body`` cut into reads of ``size`` bytes (1 = byte by byte, splitting UTF-8)."""
    return [body[i : i + size] for i in range(0, len(body), size)]
