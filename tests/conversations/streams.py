"""Recorded-style OpenAI-compatible SSE bodies for the "What time is it?" turn.

Iteration 1 streams reasoning (``reasoning_content``) and a ``current_time`` tool call whose
arguments arrive in fragments (id and name only on the first). Iteration 2 answers with an inline
``<think>`` block split across chunks.
"""

from __future__ import annotations

import json

CALL_ID = "call_Tm9XyZ01"
MODEL = "test-model"


def _chunk(delta: dict, finish: str | None = None, *, usage: dict | None = None) -> bytes:
    body = {
        "id": "chatcmpl-t1",
        "object": "chat.completion.chunk",
        "created": 1764400000,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n".encode()


def _usage(prompt: int, completion: int) -> bytes:
    body = {
        "id": "chatcmpl-t1",
        "object": "chat.completion.chunk",
        "created": 1764400000,
        "model": MODEL,
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
    return f"data: {json.dumps(body)}\n\n".encode()


DONE = b"data: [DONE]\n\n"


def tool_call_pieces() -> list[bytes]:
    """Iteration 1: reasoning, then a fragmented ``current_time`` call."""
    return [
        _chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
        _chunk({"reasoning_content": "The user wants the time."}),
        _chunk({"reasoning_content": " I should call current_time."}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": CALL_ID,
                        "type": "function",
                        "function": {"name": "current_time", "arguments": ""},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"time'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'zone": "UT'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'C"}'}}]}),
        _chunk({}, "tool_calls"),
        _usage(40, 12),
        DONE,
    ]


ANSWER = "It is now the time the tool reported."


def answer_pieces() -> list[bytes]:
    """Iteration 2: an answer behind an inline ``<think>`` block split across chunks."""
    return [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "<thi"}),
        _chunk({"content": "nk>Tool said UTC time; answer briefly.</th"}),
        _chunk({"content": "ink>\n\nIt is now"}),
        _chunk({"content": " the time the tool reported."}),
        _chunk({}, "stop"),
        _usage(70, 20),
        DONE,
    ]


def text_pieces(text: str) -> list[bytes]:
    """A plain one-iteration answer."""
    return [_chunk({"role": "assistant", "content": ""}), _chunk({"content": text}), _chunk({}, "stop"), DONE]
