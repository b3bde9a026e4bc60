"""Anthropic Messages stream parsing (pure): ``message_start``, ``content_block_start/delta/stop``,
``message_delta``, ``message_stop``, ``ping``, ``error`` events → chunks.

See :class:`AnthropicStreamParser` for the rules; the request side is
:mod:`providers._anthropic_request`.
"""

from __future__ import annotations

import json
from typing import Any

from providers._errorbody import error_info
from providers._stream_base import StreamParserBase
from providers.chunks import (
    Done,
    ProviderChunk,
    ProviderStateChunk,
    ReasoningDelta,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
    UsageChunk,
)
from providers.errors import (
    BadResponseError,
    ProviderError,
    ProviderTimeoutError,
    StreamTruncatedError,
)
from providers.messages import Usage
from providers.replay_identity import replay_identity
from providers.sse import ServerSentEvent
from providers.think import ThinkTagSplitter


def _count(value: Any) -> int:
    """A usage count as given, or 0 when absent or not a non-negative int."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class _Block:
    __slots__ = (
        "kind",
        "open",
        "parts",
        "signature",
        "data",
        "call",
        "id",
        "name",
        "input",
        "got_arguments",
        "chars",
    )

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.open = True
        self.parts: list[str] = []
        self.signature: list[str] = []
        self.data: str = ""
        self.call = -1
        self.id = ""
        self.name = ""
        self.input: Any = None
        self.got_arguments = False
        self.chars = 0  # text characters emitted while this block was current


class AnthropicStreamParser(StreamParserBase):
    """Anthropic Messages events → provider chunks (one response; pure).

    Rules:
        * ``thinking_delta`` → reasoning; ``signature_delta`` is accumulated (``+=``) per block
          (SC-22); ``redacted_thinking`` arrives whole in ``content_block_start`` and is kept,
          never shown (SC-23). When there are such blocks (or text follows a tool use), one
          ``ProviderStateChunk({"provider", "endpoint"?, "blocks": [...]})`` before ``Done``
          records the response's block layout, in stream order: thinking and redacted blocks
          whole, text as ``{"type": "text", "chars": n}`` (its share of the answer text), tool
          uses as ``{"type": "tool_use", "id"}`` (see ``Message.assistant``), so interleaved
          thinking is replayed in the order it streamed.
        * ``tool_use`` → ``ToolCallStart``; ``input_json_delta`` → argument fragments (empty
          ones skipped; a call with none has ``"{}"``: RC-10).
        * Usage: input from ``message_start`` = ``input_tokens`` + ``cache_read_input_tokens`` +
          ``cache_creation_input_tokens`` (Anthropic counts them apart; ``Usage`` includes them),
          cached = ``cache_read_input_tokens``; ``output_tokens`` from the last ``message_delta``
          (cumulative: replace, never add).
        * Success needs ``message_stop``, or a ``message_delta`` stop reason with every block
          closed; otherwise :class:`StreamTruncatedError` (SC-27). Once that holds, a
          connection reset or stall that follows does not fail the stream. At ``message_stop``
          an open text or thinking block counts as closed (its text is whole as far as we can
          tell), but an open ``tool_use`` block fails the stream (:class:`StreamTruncatedError`:
          its input may be cut short, and a call never runs on a guess). A block started twice,
          or a stream with no block and no stop reason → :class:`BadResponseError`. A tool_use
          without a name is passed on with ``name ""`` (the agent loop answers it with an error
          result and sends it back under a placeholder name: ``blocks.sendable_tool_name``).
          ``error`` events → :class:`InBandError`. ``ping`` is ignored.
    """

    def __init__(
        self,
        *,
        provider_name: str = "anthropic",
        endpoint: str | None = None,
        think_tags: bool = True,
        implicit_think_start: bool = False,
    ) -> None:
        self.provider_name = provider_name
        self._identity = replay_identity(provider_name, endpoint)
        self._text_block: _Block | None = None  # the block text is attributed to
        self._tail_chars = 0  # text flushed at the end with no text block to attribute it to
        self._splitter = ThinkTagSplitter(implicit_start=implicit_think_start) if think_tags else None
        self.error: ProviderError | None = None
        self.finished = False
        self.finish_reason: str | None = None
        self._input_tokens: int | None = None
        self._cached_tokens = 0
        self._output_tokens: int | None = None
        self._blocks: dict[int, _Block] = {}
        self._started: set[int] = set()
        self._calls = 0
        self._stopped = False

    def _feed(self, event: ServerSentEvent) -> list[ProviderChunk]:
        data = event.data.strip()
        if not data:
            return []
        obj = self._event_object(event, data)
        if obj is None:
            return []
        kind = obj.get("type") or event.event
        out: list[ProviderChunk] = []
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            index = obj.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                self._malformed(f"{kind} index is not an integer")
                return out
            field = {"content_block_start": "content_block", "content_block_delta": "delta"}.get(kind)
            if field is not None and not isinstance(obj.get(field), dict):
                self._malformed(f"{kind} {field} is not an object")
                return out
        elif kind in ("message_start", "message_delta"):
            field = "message" if kind == "message_start" else "delta"
            if obj.get(field) is not None and not isinstance(obj.get(field), dict):
                self._malformed(f"{kind} {field} is not an object")
                return out
        if kind == "message_start":
            self._usage((obj.get("message") or {}).get("usage"), start=True)
        elif kind == "content_block_start":
            if obj["index"] in self._started:
                self._malformed(f"content_block_start repeated for index {obj['index']}")
                return out
            self._started.add(obj["index"])
            self._start(obj["index"], obj["content_block"], out)
        elif kind == "content_block_delta":
            self._delta(obj["index"], obj["delta"], out)
        elif kind == "content_block_stop":
            self._stop(obj["index"], out)
        elif kind == "message_delta":
            stop_reason = (obj.get("delta") or {}).get("stop_reason")
            if isinstance(stop_reason, str) and stop_reason:
                self.finish_reason = stop_reason
            self._usage(obj.get("usage"), start=False)
        elif kind == "message_stop":
            self._stopped = True
            self.finished = True
        elif kind == "error":
            self._fail(*error_info(obj))
        return out

    def end(self, failure: ProviderError | None = None) -> list[ProviderChunk]:
        """Trailing chunks; ``Done`` only when the stream succeeded (else ``error`` is set)."""
        out: list[ProviderChunk] = []
        complete = self._stopped or (
            self.finish_reason is not None and not any(b.open for b in self._blocks.values())
        )
        if (
            isinstance(failure, (StreamTruncatedError, ProviderTimeoutError))
            and complete
            and self.error is None
        ):
            failure = None  # the terminal event arrived: only the connection's tail was lost
        open_call = next((b for b in self._blocks.values() if b.open and b.kind == "tool_use"), None)
        if failure is not None:
            failure.finish_reason = failure.finish_reason or self.finish_reason
            self.error = failure
        elif self.error is None and not complete:
            self.error = StreamTruncatedError("stream ended without message_stop", http_status=200)
        elif self.error is None and open_call is not None:
            # message_stop with a tool_use block never closed: its input may be cut short.
            self.error = StreamTruncatedError(
                f"stream ended with tool_use block {open_call.id or '?'} still open",
                http_status=200,
                finish_reason=self.finish_reason,
            )
        elif self.error is None and not self._blocks and self.finish_reason is None:
            self.error = BadResponseError(
                "provider returned an empty stream", http_status=200, retryable=True
            )
        if self._splitter is not None:
            self._split_out(self._splitter.flush(failed=self.error is not None), out)
        if self._input_tokens is not None or self._output_tokens is not None:
            usage = Usage(self._input_tokens or 0, self._output_tokens or 0, self._cached_tokens)
            out.append(UsageChunk(usage))
        if self.error is None:
            layout = self._layout()
            if layout is not None:
                out.append(ProviderStateChunk({**self._identity, "blocks": layout}))
            out.append(Done(self.finish_reason))
        return out

    def _layout(self) -> list[dict[str, Any]] | None:
        """The block layout for ``provider_state``, or None when the plain order (thinking, text,
        tool uses) says it all and nothing needs replaying."""
        layout: list[dict[str, Any]] = []
        replayable = interleaved = False
        seen_tool = False
        for block in self._blocks.values():  # stream order
            if block.kind in ("thinking", "redacted_thinking"):
                replayable = True
                layout.append(self._replay_dict(block))
            elif block.kind == "text" and block.chars:
                interleaved = interleaved or seen_tool
                layout.append({"type": "text", "chars": block.chars})
            elif block.kind == "tool_use":
                seen_tool = True
                layout.append({"type": "tool_use", "id": block.id})
        if self._tail_chars:
            layout.append({"type": "text", "chars": self._tail_chars})
        return layout if replayable or interleaved else None

    # --- internals ----------------------------------------------------------------------------

    def _usage(self, usage: Any, *, start: bool) -> None:
        if not isinstance(usage, dict):
            return
        inp, outp = usage.get("input_tokens"), usage.get("output_tokens")
        read = usage.get("cache_read_input_tokens")
        created = usage.get("cache_creation_input_tokens")
        if (start or self._input_tokens is None) and (
            isinstance(inp, int) or isinstance(read, int) or isinstance(created, int)
        ):
            self._input_tokens = _count(inp) + _count(read) + _count(created)
            self._cached_tokens = _count(read)
        if isinstance(outp, int):
            self._output_tokens = outp

    def _block(self, index: Any, kind: str) -> _Block:
        block = self._blocks.get(index)
        if block is None:  # a delta without its start: tolerate, typed by the delta
            block = self._blocks[index] = _Block(kind)
        return block

    def _start(self, index: Any, content: dict[str, Any], out: list[ProviderChunk]) -> None:
        kind = content.get("type", "")
        block = self._blocks[index] = _Block(kind)
        if kind == "text":
            self._text_block = block
            self._text(content.get("text"), out)
        elif kind == "thinking":
            self._server_reasoning(out)
            if isinstance(content.get("thinking"), str) and content["thinking"]:
                block.parts.append(content["thinking"])
                out.append(ReasoningDelta(content["thinking"]))
            if isinstance(content.get("signature"), str):
                block.signature.append(content["signature"])
        elif kind == "redacted_thinking":
            block.data = content.get("data") if isinstance(content.get("data"), str) else ""
        elif kind == "tool_use":
            block.call = self._calls
            self._calls += 1
            block.id = str(content.get("id") or "")
            block.name = str(content.get("name") or "")
            block.input = content.get("input")
            out.append(ToolCallStart(block.call, block.id, block.name))

    def _delta(self, index: Any, delta: dict[str, Any], out: list[ProviderChunk]) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            self._text_block = self._block(index, "text")
            self._text(delta.get("text"), out)
        elif kind == "thinking_delta":
            text = delta.get("thinking")
            if isinstance(text, str) and text:
                self._server_reasoning(out)
                self._block(index, "thinking").parts.append(text)
                out.append(ReasoningDelta(text))
        elif kind == "signature_delta":
            if isinstance(delta.get("signature"), str):
                self._block(index, "thinking").signature.append(delta["signature"])
        elif kind == "input_json_delta":
            block = self._blocks.get(index)
            fragment = delta.get("partial_json")
            if block is None or block.kind != "tool_use":
                # Arguments of a call that never started: running it (or silently dropping it)
                # would both be wrong; the stream is malformed.
                self._malformed(f"input_json_delta for block {index!r}, which is not an open tool_use")
            elif isinstance(fragment, str) and fragment:
                block.got_arguments = True
                out.append(ToolCallArgumentsDelta(block.call, fragment))

    def _stop(self, index: Any, out: list[ProviderChunk]) -> None:
        block = self._blocks.get(index)
        if block is None:
            return
        block.open = False
        if block.kind == "tool_use" and not block.got_arguments:
            # No input_json_delta: the input came whole in content_block_start (or is empty).
            initial = block.input if isinstance(block.input, dict) else {}
            out.append(ToolCallArgumentsDelta(block.call, json.dumps(initial, ensure_ascii=False)))

    def _text(self, text: Any, out: list[ProviderChunk]) -> None:
        if not isinstance(text, str) or not text:
            return
        if self._splitter is None:
            self._count(len(text))
            out.append(TextDelta(text))
        else:
            self._split_out(self._splitter.feed(text), out)

    def _count(self, chars: int) -> None:
        # Text is attributed to the block current when it is emitted (a think-tag prefix held
        # back by the splitter lands in the next text block or the tail), so the layout's
        # ``chars`` always add up to the answer text.
        if self._text_block is not None:
            self._text_block.chars += chars
        else:
            self._tail_chars += chars

    def _server_reasoning(self, out: list[ProviderChunk]) -> None:
        """Thinking comes as blocks: text no longer starts inside an implicit think span."""
        if self._splitter is not None:
            self._split_out(self._splitter.cancel_implicit_start(), out)

    def _split_out(self, pieces: list[tuple[str, str]], out: list[ProviderChunk]) -> None:
        for kind, piece in pieces:
            if kind == "text":
                self._count(len(piece))
                out.append(TextDelta(piece))
            else:
                out.append(ReasoningDelta(piece))

    @staticmethod
    def _replay_dict(block: _Block) -> dict[str, Any]:
        if block.kind == "redacted_thinking":
            return {"type": "redacted_thinking", "data": block.data}
        out: dict[str, Any] = {"type": "thinking", "text": "".join(block.parts)}
        signature = "".join(block.signature)
        if signature:
            out["signature"] = signature
        return out
