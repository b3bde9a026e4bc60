"""What one provider call takes and gives back (seed 003 §7.1): the neutral request, the tool
calls of a response, and the assembled response.

:class:`ProviderRequest` goes into :meth:`providers.base.LLMProvider.stream`;
:class:`AssistantResponse` (with its :class:`ToolCall` list) is what
:class:`providers.base.StreamAccumulator` builds from the stream, what ``collect()`` returns and
what post-request hooks see. Plain values: no I/O, nothing of the stream machinery.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from providers.blocks import ToolUseBlock
from providers.errors import ProviderError
from providers.json_depth import MAX_JSON_DEPTH, text_too_deep
from providers.messages import Message, ToolDefinition, Usage
from providers.unicode_text import fix_surrogates, map_strings


@dataclass(slots=True)
class ProviderRequest:
    """What to send to the model.

    Attributes:
        messages: the conversation; system messages are merged into one, sent first.
        tools: tools the model may call.
        max_tokens: output token cap, or None for the provider's configured default.
        temperature: sampling temperature, or None for the model default.
    """

    messages: list[Message]
    tools: list[ToolDefinition] = field(default_factory=list)
    max_tokens: int | None = None
    temperature: float | None = None


class ToolArgumentsError(ValueError):
    """A tool call's argument text is not a JSON object."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# A ``\uD800``-``\uDFFF`` escape or a raw surrogate: only then can parsed strings hold a lone one.
_MAY_HOLD_SURROGATES = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")


_UNPARSED: Any = object()


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A complete tool call from one response; ``arguments_json`` is the raw argument text.

    The text is parsed at most once (:meth:`arguments` keeps its value or its error) and its
    UTF-8 size measured at most once (:attr:`argument_bytes`): the tool block, the registry and
    the history message all ask for them, and a large text must not be parsed three times.
    """

    id: str
    name: str
    arguments_json: str
    _parsed: Any = field(default=_UNPARSED, init=False, repr=False, compare=False)
    _size: int = field(default=-1, init=False, repr=False, compare=False)

    @property
    def argument_bytes(self) -> int:
        """The argument text's size in UTF-8 bytes (a lone surrogate counts 3), measured once."""
        if self._size < 0:
            size = len(self.arguments_json.encode("utf-8", "surrogatepass"))
            object.__setattr__(self, "_size", size)
        return self._size

    def arguments(self) -> dict[str, Any]:
        """The arguments as a dict; an empty or blank text counts as ``{}``.

        Parsed on the first call only: later calls return the same dict (callers must not
        mutate it) or raise the same error again.

        Lone surrogates in its strings (a ``"\\ud800"`` escape without its partner) are replaced
        by U+FFFD (``unicode_text.fix_surrogates``): they could be neither stored nor sent.

        Raises:
            ToolArgumentsError: the text is not strict JSON (NaN/Infinity rejected), not an
                object, or nests deeper than ``json_depth.MAX_JSON_DEPTH`` levels (checked
                before parsing, without recursion: a runaway ``[[[[…`` must not reach the
                recursive parser, nor any later walk of the value).
        """
        parsed = self._parsed
        if parsed is _UNPARSED:
            try:
                parsed = self._parse()
            except ToolArgumentsError as exc:
                parsed = exc
            object.__setattr__(self, "_parsed", parsed)
        if isinstance(parsed, ToolArgumentsError):
            raise ToolArgumentsError(*parsed.args) from parsed.__cause__  # a fresh traceback each time
        return parsed

    def _parse(self) -> dict[str, Any]:
        text = self.arguments_json.strip()
        if not text:
            return {}
        if text_too_deep(text):
            raise ToolArgumentsError(f"arguments of {self.name!r} nest deeper than {MAX_JSON_DEPTH} levels")
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:
            raise ToolArgumentsError(f"arguments of {self.name!r} are not valid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise ToolArgumentsError(
                f"arguments of {self.name!r} must be a JSON object, got {type(value).__name__}"
            )
        if _MAY_HOLD_SURROGATES.search(text) is not None:
            value = map_strings(value, fix_surrogates)
        return value


NORMAL_FINISH_REASONS = frozenset({"stop", "end_turn", "stop_sequence", "eos", "eos_token"})
"""Finish reasons (lowercased) of an answer the model ended itself, as the vendors send them:
``stop`` (OpenAI-compatible servers, Gemini's ``STOP``), ``end_turn`` and ``stop_sequence``
(Anthropic), ``eos``/``eos_token`` (Hugging Face TGI). Providers pass finish reasons through
unchanged (``chunks.Done``), so this list names the native spellings."""


OUTPUT_LIMIT_FINISH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens"})
"""Finish reasons (lowercased) of an answer cut off at the output token limit: ``length``
(OpenAI-compatible servers), ``max_tokens`` (Anthropic's ``stop_reason``, Gemini's
``MAX_TOKENS``), ``max_output_tokens`` (OpenAI Responses' incomplete reason)."""


def hit_output_limit(finish_reason: str | None) -> bool:
    """Whether a provider-native finish reason says the answer stopped at the output limit
    (:data:`OUTPUT_LIMIT_FINISH_REASONS`); False for None."""
    return isinstance(finish_reason, str) and finish_reason.lower() in OUTPUT_LIMIT_FINISH_REASONS


@dataclass(slots=True)
class AssistantResponse:
    """The assembled result of one provider call.

    Attributes:
        text: visible answer text (``""`` when none).
        reasoning: readable reasoning, or None when none arrived.
        tool_calls: complete calls in creation order (``[]`` for a failed stream).
        usage: token usage, or None when the provider sent none.
        finish_reason: provider-native finish reason, or None.
        provider_state: replay state for the next request, or None.
        error: the failure that ended the stream, or None on success.
    """

    text: str
    reasoning: str | None
    tool_calls: list[ToolCall]
    usage: Usage | None
    finish_reason: str | None
    provider_state: dict[str, Any] | None
    error: ProviderError | None = None

    @property
    def truncated(self) -> bool:
        """Whether the answer was cut off at the output token limit (``length``/``max_tokens``:
        :func:`hit_output_limit`); a failed stream is never truncated, it failed."""
        return self.error is None and hit_output_limit(self.finish_reason)

    @property
    def finished_normally(self) -> bool:
        """Whether the model ended the answer itself (:data:`NORMAL_FINISH_REASONS`).

        Every reason a vendor sends for anything else counts as not finished normally:
        ``length``/``max_tokens`` (cut off at the output cap), ``content_filter``, ``refusal``,
        ``model_context_window_exceeded``, ``pause_turn``, ``tool_calls``/``tool_use`` and any
        reason we do not know — a consumer that needs a whole answer (a summary, a title) must
        not take such text. No reason at all (None: a server that ended a complete stream with
        ``[DONE]`` and never named one) is no sign of a cut and counts as finished; a stream that
        broke off raises instead of ending.
        """
        reason = self.finish_reason
        return reason is None or reason.lower() in NORMAL_FINISH_REASONS

    def to_message(self, *, max_argument_bytes: int | None = None) -> Message:
        """The assistant :class:`Message` for history.

        Empty text blocks are dropped (seed SC-25); calls whose arguments are not a JSON object
        are kept with ``{}`` arguments and their text in ``raw_arguments`` (the agent loop
        answers them with an error result; the next request shows the model what it sent).
        A call whose argument text is over ``max_argument_bytes`` (UTF-8; None: no bound) is
        kept with ``{}`` arguments, unparsed: its error result names the size, and the text is
        too large to keep or to send back.
        """
        calls = []
        for call in self.tool_calls:
            if max_argument_bytes is not None and call.argument_bytes > max_argument_bytes:
                calls.append(ToolUseBlock(call.id, call.name, {}))
                continue
            try:
                calls.append(ToolUseBlock(call.id, call.name, call.arguments()))
            except ToolArgumentsError:
                calls.append(ToolUseBlock(call.id, call.name, {}, call.arguments_json))
        return Message.assistant(self.text, self.reasoning, calls, self.provider_state)
