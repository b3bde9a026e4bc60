"""The offline replay provider: recorded OpenAI-format streams, played through the real parser.

With no LLM configured, PicoBot still answers (DESIGN §2), clearly labelled ``offline``. The
transcripts in ``providers/transcripts/`` are ordinary ``chat.completion.chunk`` SSE bodies;
they are served through an ``httpx2.MockTransport`` into a real :class:`OpenAICompatProvider`,
so they are parsed exactly like a live stream (think tags, tool-call fragments, usage).

Which transcript plays is decided from the request body the provider sends:

1. the last message is a tool result → ``after_tool.sse``, with ``{{TOOL_RESULT}}`` replaced by
   the tool's output (so the answer states the actual time);
2. the last user text asks about the time or date and ``current_time`` is among the tools →
   ``time_tool_call.sse`` (reasoning, then a ``current_time`` call streamed in fragments);
3. otherwise → ``offline_answer.sse``, which explains how to configure a real model and quotes
   the user (``{{USER_QUOTE}}``).

Placeholders are replaced JSON-escaped, inside the recorded JSON strings.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2

from providers.base import LLMProvider
from providers.chunks import ProviderChunk
from providers.messages import RUNTIME_CONTEXT_MARKER
from providers.openai_compat import OpenAICompatProvider
from providers.types import ProviderRequest

DEFAULT_TRANSCRIPT_DIR = Path(__file__).resolve().parent / "transcripts"
TRANSCRIPTS = ("offline_answer.sse", "time_tool_call.sse", "after_tool.sse")
TIME_TOOL = "current_time"
_TIME_QUESTION = re.compile(r"\b(time|date|clock|what day)\b|几点|时间|日期", re.IGNORECASE)
_QUOTE_CHARS = 80
_RESULT_CHARS = 500


def _escape(value: str) -> str:
    """``value`` as the inside of a JSON string literal."""
    return json.dumps(value, ensure_ascii=False)[1:-1]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _quote(text: str) -> str:
    """The first line of the user's text, shortened, with tag brackets neutralised."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if len(first) > _QUOTE_CHARS:
        first = first[: _QUOTE_CHARS - 1].rstrip() + "…"
    return first.replace("<", "‹").replace(">", "›") or "…"


def choose_transcript(body: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The transcript file name and placeholder values for a Chat Completions request body."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        result = _text_of(last.get("content"))[:_RESULT_CHARS]
        return "after_tool.sse", {"TOOL_RESULT": result}
    user_text = next((_text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    # Only what the user typed decides, not the runtime context (which always says "time=").
    user_text = user_text.split(RUNTIME_CONTEXT_MARKER, 1)[0]
    tools = {t.get("function", {}).get("name") for t in body.get("tools") or []}
    if TIME_TOOL in tools and _TIME_QUESTION.search(user_text):
        return "time_tool_call.sse", {"CALL_ID": f"call_{uuid.uuid4().hex[:24]}"}
    return "offline_answer.sse", {"USER_QUOTE": _quote(user_text)}


class ReplayProvider(LLMProvider):
    """Plays recorded transcripts through :class:`OpenAICompatProvider` (no network).

    Args:
        transcript_dir: folder holding ``offline_answer.sse``, ``time_tool_call.sse`` and
            ``after_tool.sse``; None for the bundled ``providers/transcripts``.
        event_delay: seconds between SSE events, to look like a live stream (0 in tests).

    Raises:
        ValueError: a transcript file is missing.
    """

    name = "replay"
    model = "replay"
    offline = True

    def __init__(self, transcript_dir: str | Path | None = None, *, event_delay: float = 0.0) -> None:
        self.transcript_dir = Path(transcript_dir) if transcript_dir else DEFAULT_TRANSCRIPT_DIR
        missing = [n for n in TRANSCRIPTS if not (self.transcript_dir / n).is_file()]
        if missing:
            raise ValueError(
                f"replay transcripts missing in {self.transcript_dir}: {', '.join(missing)} (PICOBOT_REPLAY_DIR)"
            )
        self.event_delay = event_delay
        self._inner = OpenAICompatProvider(
            "http://replay.invalid/v1",
            "",
            "replay",
            transport=httpx2.MockTransport(self._handle),
            max_retries=0,
            name=self.name,
        )

    def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        """Stream the chosen transcript (see the module docstring); no network I/O."""
        return self._inner.stream(request)

    async def aclose(self) -> None:
        """Close the inner client."""
        await self._inner.aclose()

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        name, values = choose_transcript(json.loads(request.content))
        text = (self.transcript_dir / name).read_text(encoding="utf-8")
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", _escape(value))
        return httpx2.Response(
            200,
            headers={"content-type": "text/event-stream; charset=utf-8"},
            content=self._body(text.encode()),
        )

    async def _body(self, data: bytes) -> AsyncIterator[bytes]:
        for event in data.split(b"\n\n"):
            if event:
                yield event + b"\n\n"
                if self.event_delay:
                    await asyncio.sleep(self.event_delay)
