"""OpenAI Chat Completions stream parsing (pure): ``chat.completion.chunk`` events → chunks.

See :class:`OpenAIStreamParser` for the rules (cases SC-01…SC-19, RC-01…RC-07); the request
side is :mod:`providers._openai_request`.
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
    InBandError,
    ProviderError,
    ProviderTimeoutError,
    StreamTruncatedError,
)
from providers.messages import Usage
from providers.replay_identity import replay_identity
from providers.sse import ServerSentEvent
from providers.think import ThinkTagSplitter


def _usage(raw: dict[str, Any]) -> Usage:
    """``usage`` → :class:`Usage`: ``prompt_tokens`` (cached included), ``completion_tokens``
    (reasoning included), ``prompt_tokens_details.cached_tokens`` and
    ``completion_tokens_details.reasoning_tokens`` (the ``input_``/``output_`` spellings too);
    a missing or malformed count is 0."""

    def count(source: Any, *keys: str) -> int:
        if isinstance(source, dict):
            for key in keys:
                value = source.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    return value
        return 0

    input_tokens = count(raw, "prompt_tokens", "input_tokens")
    output_tokens = count(raw, "completion_tokens", "output_tokens")
    prompt = raw.get("prompt_tokens_details") or raw.get("input_tokens_details")
    completion = raw.get("completion_tokens_details") or raw.get("output_tokens_details")
    return Usage(
        input_tokens,
        output_tokens,
        min(count(prompt, "cached_tokens"), input_tokens),
        min(count(completion, "reasoning_tokens"), output_tokens),
    )


class OpenAIStreamParser(StreamParserBase):
    """``chat.completion.chunk`` events → provider chunks (one response; pure).

    Rules:
        * ``choices`` may be empty or absent on any chunk (SC-10); only choice 0 is used.
        * Per delta, in order: ``reasoning_content``, else a string ``reasoning`` (SC-03; never
          ``reasoning_details``); ``content`` through the think-tag splitter (SC-01/02);
          ``refusal`` as text (RC-04); ``tool_calls`` fragments by ``index`` (SC-06/07).
          The payload is applied before ``finish_reason`` is recorded (SC-11), and a later
          null never resets it (SC-03).
        * ``usage`` from any chunk, last non-null wins (SC-10, RC-07).
        * A top-level ``error``, ``{"object": "error"}`` or an ``event: error`` ends the stream
          with :class:`InBandError` (or :class:`ContextOverflowError`) after its payload (SC-18);
          a later ``[DONE]`` does not make it a success.
        * End of body without ``finish_reason``, ``[DONE]`` or error → :class:`StreamTruncatedError`
          (SC-19); ``[DONE]`` after nothing at all → :class:`BadResponseError` (empty stream).

    Args:
        provider_name: the ``provider`` key of the replay state it emits.
        endpoint: the ``endpoint`` key of the replay state (the provider's normalised base
            URL), or None (then the state has no ``endpoint`` key).
        think_tags: extract ``<think>`` spans from content.
        implicit_think_start: content starts inside a think span (SC-02).
    """

    def __init__(
        self,
        *,
        provider_name: str = "openai",
        endpoint: str | None = None,
        think_tags: bool = True,
        implicit_think_start: bool = False,
    ) -> None:
        self.provider_name = provider_name
        self._identity = replay_identity(provider_name, endpoint)
        self._splitter = ThinkTagSplitter(implicit_start=implicit_think_start) if think_tags else None
        self.error: ProviderError | None = None
        self.finished = False
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self._done_marker = False
        self._saw_payload = False
        self._reasoning_field: str | None = None
        self._by_wire_index: dict[int, int] = {}
        self._ids: list[str] = []
        self._names: list[str] = []
        self._last_call: int | None = None

    def _feed(self, event: ServerSentEvent) -> list[ProviderChunk]:
        data = event.data.strip()
        if not data:
            return []  # SC-17: bare data:, retry:, id:, event: ping
        if data == "[DONE]":
            self._done_marker = True
            self.finished = True
            return []
        obj = self._event_object(event, data)
        if obj is None:
            return []
        out: list[ProviderChunk] = []
        choices = obj.get("choices")
        if choices is not None and not isinstance(choices, list):
            self._malformed("choices is not a list")
            return out
        for choice in choices or ():
            if not isinstance(choice, dict):
                self._malformed("a choice is not an object")
                return out
            index = choice.get("index")
            if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
                self._malformed("a choice index is not an integer")
                return out
            if index in (0, None):
                self._apply_choice(choice, out)
            if self.error is not None:
                return out
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = _usage(usage)
        error = obj.get("error")
        # An empty error object is still an error ({"error": {}}); only null/absent means none.
        if isinstance(error, dict) or error or obj.get("object") == "error" or event.event == "error":
            self._fail(*error_info(obj))
        return out

    def end(self, failure: ProviderError | None = None) -> list[ProviderChunk]:
        """Trailing chunks; ``Done`` only when the stream succeeded (else ``error`` is set).

        A connection that drops or stalls after ``finish_reason`` (or ``[DONE]``) arrived does
        not fail the stream: the answer is complete, only the tail (usage) may be missing.
        """
        out: list[ProviderChunk] = []
        if (
            isinstance(failure, (StreamTruncatedError, ProviderTimeoutError))
            and self.error is None
            and (self._done_marker or (self.finish_reason and self.finish_reason != "error"))
        ):
            failure = None
        if failure is not None:
            failure.finish_reason = failure.finish_reason or self.finish_reason
            self.error = failure
        elif self.error is None and not (self._done_marker or self.finish_reason):
            self.error = StreamTruncatedError(
                "stream ended without finish_reason or [DONE]",
                http_status=200,
                finish_reason=self.finish_reason,
            )
        elif self.error is None and not self._saw_payload:
            self.error = BadResponseError(
                "provider returned an empty stream", http_status=200, retryable=True
            )
        elif self.error is None and self.finish_reason == "error":
            # OpenRouter & co.: the upstream failed mid-answer, no error object sent.
            self.error = InBandError(
                'provider ended the stream with finish_reason "error"',
                http_status=200,
                retryable=True,
                finish_reason="error",
            )
        if self._splitter is not None:
            self._split_out(self._splitter.flush(failed=self.error is not None), out)
        if self.usage is not None:
            out.append(UsageChunk(self.usage))
        if self.error is None:
            if self._reasoning_field == "reasoning_content":
                out.append(ProviderStateChunk({**self._identity, "reasoning_field": "reasoning_content"}))
            out.append(Done(self.finish_reason))
        return out

    # --- internals ----------------------------------------------------------------------------

    def _apply_choice(self, choice: dict[str, Any], out: list[ProviderChunk]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            self._apply_delta(delta, out)
        elif delta is not None:
            self._malformed("delta is not an object")
            return
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            self.finish_reason = finish
            self._saw_payload = True

    def _apply_delta(self, delta: dict[str, Any], out: list[ProviderChunk]) -> None:
        field = "reasoning_content"
        reasoning = delta.get(field)
        if not (isinstance(reasoning, str) and reasoning):
            field, reasoning = "reasoning", delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self._reasoning_field = self._reasoning_field or field
            self._saw_payload = True
            self._server_reasoning(out)
            out.append(ReasoningDelta(reasoning))
        content = delta.get("content")
        if isinstance(content, str):
            self._text(content, out)
        elif isinstance(content, list):  # content parts (Mistral): text and thinking
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text":
                    self._text(part.get("text"), out)
                elif isinstance(part, dict) and part.get("type") == "thinking":
                    for inner in part.get("thinking") or ():
                        if isinstance(inner, dict) and isinstance(inner.get("text"), str) and inner["text"]:
                            self._server_reasoning(out)
                            out.append(ReasoningDelta(inner["text"]))
        self._text(delta.get("refusal"), out)
        tool_calls = delta.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            self._malformed("tool_calls is not a list")
            return
        for fragment in tool_calls or ():
            if not isinstance(fragment, dict):
                self._malformed("a tool call fragment is not an object")
                return
            index = fragment.get("index")
            if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
                self._malformed("a tool call index is not an integer")
                return
            self._tool_fragment(fragment, out)

    def _server_reasoning(self, out: list[ProviderChunk]) -> None:
        """The server separates reasoning itself: content no longer starts inside a span."""
        if self._splitter is not None:
            self._split_out(self._splitter.cancel_implicit_start(), out)

    def _text(self, text: Any, out: list[ProviderChunk]) -> None:
        if not isinstance(text, str) or not text:
            return
        self._saw_payload = True
        if self._splitter is None:
            out.append(TextDelta(text))
        else:
            self._split_out(self._splitter.feed(text), out)

    @staticmethod
    def _split_out(pieces: list[tuple[str, str]], out: list[ProviderChunk]) -> None:
        for kind, piece in pieces:
            out.append(TextDelta(piece) if kind == "text" else ReasoningDelta(piece))

    def _tool_fragment(self, fragment: dict[str, Any], out: list[ProviderChunk]) -> None:
        function = fragment.get("function") if isinstance(fragment.get("function"), dict) else {}
        call_id = fragment.get("id") if isinstance(fragment.get("id"), str) else ""
        name = function.get("name") if isinstance(function.get("name"), str) else ""
        wire_index = fragment.get("index")
        if isinstance(wire_index, int) and not isinstance(wire_index, bool):
            ours = self._by_wire_index.get(wire_index)
            if ours is not None and call_id and self._ids[ours] and call_id != self._ids[ours]:
                ours = None  # a new call reusing the index (some servers send every call as index 0)
        else:  # no index: a new id starts a new call; anything else continues the last one
            ours = self._last_call
            if ours is not None and call_id and self._ids[ours] and call_id != self._ids[ours]:
                ours = None
        self._saw_payload = True
        if ours is None:
            ours = len(self._ids)
            self._ids.append(call_id)
            self._names.append(name)
            if isinstance(wire_index, int):
                self._by_wire_index[wire_index] = ours
            out.append(ToolCallStart(ours, call_id, name))
        elif (call_id and not self._ids[ours]) or (name and not self._names[ours]):
            self._ids[ours] = self._ids[ours] or call_id
            self._names[ours] = self._names[ours] or name
            out.append(ToolCallStart(ours, self._ids[ours], self._names[ours]))
        self._last_call = ours
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # a few servers send parsed arguments
            arguments = json.dumps(arguments, ensure_ascii=False)
        if isinstance(arguments, str) and arguments:
            out.append(ToolCallArgumentsDelta(ours, arguments))
