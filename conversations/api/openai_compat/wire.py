"""The OpenAI wire format of ``/v1`` (issue 18): request validation, error bodies, completions
and stream chunks, and the deltas of a turn's cumulative snapshots. Pure: no Django, no I/O.

Shapes follow OpenAI's Chat Completions API reference (``chat.completion``,
``chat.completion.chunk``, ``{"error": {message, type, param, code}}``); ``reasoning_content`` is
the field DeepSeek, vLLM and others use for reasoning deltas.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from conversations.chat.frames import MAX_CONTENT_CHARS

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"

ROLES = ("system", "developer", "user", "assistant")
INSTRUCTION_ROLES = ("system", "developer")
CLIENT_TOOL_FIELDS = ("tools", "functions", "tool_choice", "function_call")
TOOLS_REFUSED = (
    "client-side tools are not supported: the agent runs its own tools on the server; "
    "send the request without {field}"
)


class WireError(Exception):
    """A request the endpoint refuses, in OpenAI's terms.

    Attributes:
        status: the HTTP status (400, 401, 404, 413, 429, 500, 503…).
        message: what is wrong, for a person (never a payload or a stack trace).
        type: OpenAI's error ``type`` (``invalid_request_error``, ``server_error``…).
        param: the request field at fault, or None.
        code: a machine-readable code (``invalid_api_key``, ``model_not_found``…), or None.
        headers: extra response headers (``Retry-After``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = INVALID_REQUEST,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        """``{"error": {message, type, param, code}}``."""
        return error_body(self.message, type=self.type, param=self.param, code=self.code)


def error_body(message: str, *, type: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass(frozen=True)
class CompletionRequest:
    """A validated ``POST /v1/chat/completions`` body.

    Attributes:
        model: the preset name asked for.
        history: the earlier user and assistant messages, ``[(role, text)]``, oldest first.
        prompt: the last message's text (a user message): the turn's input.
        instructions: the system and developer messages' texts, joined by blank lines.
        stream: answer as server-sent events.
        include_usage: ``stream_options.include_usage``: end the stream with a usage chunk.
        user: the body's ``user`` field (names a kept dialog when no header does), or None.
    """

    model: str
    history: tuple[tuple[str, str], ...]
    prompt: str
    instructions: str
    stream: bool = False
    include_usage: bool = False
    user: str | None = None


def _bad(message: str, param: str | None = None, code: str | None = None) -> WireError:
    return WireError(400, message, param=param, code=code)


def _text(content: Any, where: str) -> str:
    """A message's text: a string, or a list of ``{"type": "text", "text": …}`` parts (joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for index, part in enumerate(content):
            if (
                not isinstance(part, Mapping)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise _bad(
                    f"{where}.content[{index}]: only text parts are supported "
                    '({"type": "text", "text": "…"})',
                    param=f"{where}.content",
                )
            parts.append(part["text"])
        return "".join(parts)
    raise _bad(f"{where}.content must be a string or a list of text parts", param=f"{where}.content")


def _message(item: Any, index: int) -> tuple[str, str]:
    where = f"messages[{index}]"
    if not isinstance(item, Mapping):
        raise _bad(f"{where} must be an object with role and content", param=where)
    role = item.get("role")
    if role in ("tool", "function"):
        raise _bad(
            f"{where}: role {role!r} is not supported: the agent runs its own tools on the server",
            param=f"{where}.role",
        )
    if role not in ROLES:
        raise _bad(f"{where}.role must be one of {', '.join(ROLES)}", param=f"{where}.role")
    if item.get("tool_calls") or item.get("function_call"):
        raise _bad(f"{where}: client-side tool calls are not supported", param=f"{where}.tool_calls")
    return role, _text(item.get("content"), where)


def parse_request(body: bytes) -> CompletionRequest:
    """Validate a chat completion request body.

    Sampling options (``temperature``, ``max_tokens``…) and fields this endpoint has no use for
    are accepted and ignored: the model preset decides them.

    Raises:
        WireError: 400 for a body that is not a JSON object, a missing or empty ``model`` or
            ``messages``, a message of another role or with non-text parts, a last message
            that is not from the user or is blank or over 32 000 characters, client-side tools,
            ``n`` other than 1, a ``stream`` or ``stream_options`` of the wrong type.
    """
    try:
        data = json.loads(body)
    except RecursionError:  # nesting deeper than the parser's stack: never a chat request
        raise _bad("the request body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError):
        raise _bad("the request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise _bad("the request body must be a JSON object")
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise _bad("model is required: a model id of GET /v1/models", param="model")
    for name in CLIENT_TOOL_FIELDS:
        value = data.get(name)
        if value not in (None, [], "none"):
            raise _bad(TOOLS_REFUSED.format(field=name), param=name, code="unsupported_parameter")
    n = data.get("n")
    if n is not None and n != 1:
        raise _bad("n must be 1: one turn gives one answer", param="n", code="unsupported_parameter")
    stream = data.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad("stream must be true or false", param="stream")
    options = data.get("stream_options")
    if options is not None and (
        not isinstance(options, Mapping) or not isinstance(options.get("include_usage", False), bool)
    ):
        raise _bad("stream_options must be an object like {include_usage: true}", param="stream_options")
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise _bad("user must be a string", param="user")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages is required: a non-empty list", param="messages")
    parsed = [_message(item, i) for i, item in enumerate(messages)]
    last_role, prompt = parsed[-1]
    if last_role != "user":
        raise _bad(f"the last message must be from the user, not {last_role!r}", param="messages")
    if not prompt.strip():
        raise _bad("the last user message must not be blank", param="messages")
    if len(prompt) > MAX_CONTENT_CHARS:
        raise _bad(f"the last user message exceeds {MAX_CONTENT_CHARS} characters", param="messages")
    instructions = "\n\n".join(text for role, text in parsed if role in INSTRUCTION_ROLES and text.strip())
    history = tuple((role, text) for role, text in parsed[:-1] if role not in INSTRUCTION_ROLES)
    return CompletionRequest(
        model=model.strip(),
        history=history,
        prompt=prompt,
        instructions=instructions,
        stream=bool(stream),
        include_usage=bool(stream and options and options.get("include_usage")),
        user=user.strip() or None if user else None,
    )


# --- answers ------------------------------------------------------------------------------------


def answer_parts(blocks: Iterable[Mapping[str, Any]]) -> tuple[str, str]:
    """``(content, reasoning)`` of a turn object's ``blocks`` (PROTOCOL §1).

    Content as history commits it: assistant blocks of one message (same iteration, no tool
    block between them) are concatenated, messages joined by a blank line; reasoning blocks are
    joined by a blank line. Tool blocks are not shown (the agent ran them on the server).
    """
    content: list[str] = []
    reasoning: list[str] = []
    segment, key = 0, None
    for block in blocks:
        kind, text = block.get("type"), str(block.get("text") or "")
        if kind == "tool":
            segment += 1
        elif kind == "assistant":
            here = (block.get("iteration", 0), segment)
            if here == key:
                content[-1] += text
            else:
                content.append(text)
                key = here
        elif kind == "reasoning" and text:
            reasoning.append(text)
    return "\n\n".join(c for c in content if c), "\n\n".join(reasoning)


def committed_parts(rows: Iterable[Mapping[str, Any]]) -> tuple[str, str, bool]:
    """``(content, reasoning, truncated)`` of the assistant rows a turn committed (history form,
    ``seq`` order): their texts and reasonings joined by blank lines; ``truncated`` when the last
    one stopped at the model's output limit."""
    assistant = [r for r in rows if r.get("role") == "assistant"]
    content = "\n\n".join(str(r.get("content") or "") for r in assistant if r.get("content"))
    reasoning = "\n\n".join(str(r.get("reasoning") or "") for r in assistant if r.get("reasoning"))
    return content, reasoning, bool(assistant and assistant[-1].get("truncated"))


class DeltaTracker:
    """What a stream has sent of a turn's answer, and the new suffixes of each snapshot.

    Snapshots are cumulative. A text that extends what was sent yields its new suffix; one that
    does not (an earlier part was rewritten) yields nothing until a later text extends what was
    sent again — sent text cannot be taken back. ``diverged`` counts such snapshots.
    """

    def __init__(self) -> None:
        self.content = ""
        self.reasoning = ""
        self.diverged = 0

    def advance(self, content: str, reasoning: str) -> tuple[str, str]:
        """``(content_delta, reasoning_delta)`` of the texts now known ("" when nothing is new)."""
        return self._step("content", content), self._step("reasoning", reasoning)

    def _step(self, name: str, text: str) -> str:
        sent = getattr(self, name)
        if len(text) <= len(sent):
            if not sent.startswith(text):
                self.diverged += 1
            return ""
        if not text.startswith(sent):
            self.diverged += 1
            return ""
        setattr(self, name, text)
        return text[len(sent) :]


def usage_object(usage: Mapping[str, Any] | None) -> dict:
    """OpenAI's ``usage`` from ``{input_tokens, output_tokens}`` (missing counts are 0)."""
    prompt = int((usage or {}).get("input_tokens") or 0)
    completion_tokens = int((usage or {}).get("output_tokens") or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }


def completion(
    completion_id: str,
    created: int,
    model: str,
    content: str,
    reasoning: str,
    finish_reason: str,
    usage: Mapping[str, Any] | None,
) -> dict:
    """A ``chat.completion`` object with one choice (``reasoning_content`` only when there is some)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": usage_object(usage),
    }


def chunk(
    completion_id: str, created: int, model: str, delta: Mapping[str, Any], finish_reason: str | None = None
) -> dict:
    """A ``chat.completion.chunk`` with one choice."""
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish_reason, "logprobs": None}],
    }


def usage_chunk(completion_id: str, created: int, model: str, usage: Mapping[str, Any] | None) -> dict:
    """The last chunk of a stream with ``include_usage``: no choices, the turn's usage."""
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage_object(usage),
    }


def delta_chunks(completion_id: str, created: int, model: str, content: str, reasoning: str) -> list[dict]:
    """The chunks of one step's deltas: reasoning first, then content; none when both are empty."""
    out = []
    if reasoning:
        out.append(chunk(completion_id, created, model, {"reasoning_content": reasoning}))
    if content:
        out.append(chunk(completion_id, created, model, {"content": content}))
    return out


def sse_event(data: Mapping[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <compact JSON or text>`` and a blank line."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


SSE_DONE = sse_event("[DONE]")
SSE_KEEPALIVE = b": keep-alive\n\n"


def models_list(names: Iterable[str], created: int = 0) -> dict:
    """``GET /v1/models``: ``{"object": "list", "data": [model objects]}``."""
    return {"object": "list", "data": [model_object(name, created) for name in names]}


def model_object(name: str, created: int = 0) -> dict:
    """One model object: ``{id, object: "model", created, owned_by: "picobot"}``."""
    return {"id": name, "object": "model", "created": created, "owned_by": "picobot"}
