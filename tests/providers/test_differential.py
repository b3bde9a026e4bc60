"""Differential tests: the official SDKs' own stream accumulation against ours, on the same bytes.

For every case the official ``openai`` / ``anthropic`` SDKs can parse, one LocalSSEServer serves
the same body, cut the same way (one HTTP chunk per SSE event), first to our provider and then to
the SDK; both must agree on text, tool calls (id, name, parsed arguments), usage and finish
reason, and on reasoning wherever the SDK exposes it. The SDKs are test-only dependencies
(requirements-test.txt); recent releases run on httpx2, so each simply gets the server's URL.

The SDK side:

* openai: ``AsyncOpenAI().chat.completions.create(stream=True)``, every parsed chunk fed to the
  SDK's ``ChatCompletionStreamState``; its ``current_completion_snapshot`` is the accumulation
  (``get_final_completion()`` adds structured-output parsing that raises
  ``LengthFinishReasonError`` on ``finish_reason: length``: SC-05, SC-11, RC-06).
* anthropic: ``AsyncAnthropic().messages.stream(...)`` then ``get_final_message()``.

Where PicoBot's rule differs from the SDK's (tests/cases/real/README.md, "PicoBot's rules"),
only what both define is compared, case by case below:

* RC-04: the SDK keeps a refusal in ``message.refusal``; PicoBot shows it as the answer text.
* SC-01, SC-02: the SDK leaves inline ``<think>`` spans in ``content``; PicoBot moves them to
  reasoning. Both of our parts must be the SDK's content with the span's tags and whitespace
  removed.
* Reasoning fields are not in the SDK's types; its accumulator keeps ``reasoning_content`` and
  ``reasoning`` as extras on the message, and those are compared (``reasoning_details``, which
  the SDK also accumulates, is ignored by PicoBot: SC-03).
* SC-25: the SDK keeps an empty text block that PicoBot drops; text is compared joined.

Cases left out of the agreement test, because the SDK cannot parse them or accepts what PicoBot
must reject, are listed in :data:`NOT_COMPARED` with the reason; SC-18 and SC-21, which both
sides must reject, are compared as errors.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from anthropic import AsyncAnthropic
from openai import APIError, AsyncOpenAI, RateLimitError
from openai.lib.streaming.chat import ChatCompletionStreamState

from providers.blocks import RedactedThinkingBlock, ThinkingBlock
from providers.testing import LocalSSEServer, SSEResponse, split_events
from tests.providers._cases import (
    ANTHROPIC_CASES,
    Case,
    case_ids,
    load_case,
    make_provider,
    normalise,
    run_stream,
)

NOT_COMPARED = {
    "SC-17": "the openai SDK json-decodes every data line and fails on a bare `data:`",
    "SC-18": "both reject it: compared in test_in_band_error_...",
    "SC-19": "truncated: the openai SDK returns the half-streamed tool call as complete",
    "SC-20": "not SSE: the openai SDK fails with an AssertionError",
    "SC-21": "HTTP 429: compared in test_rate_limit_...",
    "SC-27": "truncated: the anthropic SDK returns the partial message as complete",
}
THINK_TAG_CASES = frozenset({"SC-01", "SC-02"})
REFUSAL_CASES = frozenset({"RC-04"})
COMPARED = [c for c in case_ids() if c not in NOT_COMPARED]
PROMPT = [{"role": "user", "content": "Hi"}]


async def _ours(case: Case, server: LocalSSEServer) -> dict[str, Any]:
    result, _ = await run_stream(make_provider(case.id, base_url=server.base_url))
    out = normalise(result)
    out["tool_calls"] = [(c["id"], c["name"], json.loads(c["arguments"])) for c in out["tool_calls"]]
    out["replay"] = [
        ("thinking", b.text, b.signature) if isinstance(b, ThinkingBlock) else ("redacted_thinking", b.data)
        for b in result.to_message().content
        if isinstance(b, ThinkingBlock | RedactedThinkingBlock)
    ]
    return out


async def _openai_sdk(server: LocalSSEServer) -> dict[str, Any]:
    """The openai SDK's accumulation (see the module docstring), in our ``normalise`` shape."""
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    async with AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0) as client:
        async for chunk in await client.chat.completions.create(
            model="test-model", messages=PROMPT, stream=True
        ):
            state.handle_chunk(chunk)
    snapshot = state.current_completion_snapshot
    choice = snapshot.choices[0]
    message = choice.message
    extra = message.model_extra or {}
    return {
        "text": message.content or "",
        "refusal": message.refusal or "",
        "reasoning": extra.get("reasoning_content") or extra.get("reasoning") or "",
        "tool_calls": [
            (c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()
        ],
        "usage": (
            {"input_tokens": snapshot.usage.prompt_tokens, "output_tokens": snapshot.usage.completion_tokens}
            if snapshot.usage
            else None
        ),
        "finish_reason": choice.finish_reason,
    }


async def _anthropic_sdk(server: LocalSSEServer) -> dict[str, Any]:
    """The anthropic SDK's final message, in our ``normalise`` shape plus the replay blocks."""
    async with (
        AsyncAnthropic(base_url=server.url, api_key="test-key", max_retries=0) as client,
        client.messages.stream(model="claude-test", max_tokens=1024, messages=PROMPT) as stream,
    ):
        message = await stream.get_final_message()
    blocks = message.content
    return {
        "text": "".join(b.text for b in blocks if b.type == "text"),
        "reasoning": "".join(b.thinking for b in blocks if b.type == "thinking"),
        "tool_calls": [(b.id, b.name, b.input) for b in blocks if b.type == "tool_use"],
        "usage": {"input_tokens": message.usage.input_tokens, "output_tokens": message.usage.output_tokens},
        "finish_reason": message.stop_reason,
        "replay": [
            ("thinking", b.thinking, b.signature) if b.type == "thinking" else ("redacted_thinking", b.data)
            for b in blocks
            if b.type in ("thinking", "redacted_thinking")
        ],
    }


def _strip_think_spans(raw: str) -> tuple[str, str]:
    """The SDK's raw content as (text, reasoning) per PicoBot's think-tag rule, for SC-01/02:
    the span (from the start when the opening tag is implicit) is reasoning, the rest text."""
    match = re.fullmatch(r"(?s)(.*?)(?:<think>)?(.*?)</think>(.*)", raw)
    assert match is not None, raw
    before, inside, after = match.groups()
    return (before + after.lstrip()).strip(), inside.strip()


def test_every_case_is_compared_or_left_out_with_a_reason() -> None:
    assert set(NOT_COMPARED) <= set(case_ids())
    assert len(COMPARED) >= 23  # every RC case, and every SC case the SDKs accept


@pytest.mark.parametrize("case_id", COMPARED)
async def test_sdk_and_picobot_agree(case_id: str) -> None:
    case = load_case(case_id)
    response = SSEResponse(case.status, case.headers, split_events(case.body))
    async with LocalSSEServer([response, response]) as server:
        ours = await _ours(case, server)
        sdk = await (_anthropic_sdk(server) if case.anthropic else _openai_sdk(server))
    assert ours["error"] is None, ours["error"]
    assert ours["tool_calls"] == sdk["tool_calls"]
    assert ours["usage"] == sdk["usage"]
    assert ours["finish_reason"] == sdk["finish_reason"]
    if case_id in ANTHROPIC_CASES:
        # Signatures and redacted blocks, in order: what the next request must send back.
        assert ours["replay"] == sdk["replay"]
    if case_id in THINK_TAG_CASES:
        # PicoBot's rule: the SDK keeps <think> spans in the text; both of our parts come from it.
        assert sdk["reasoning"] == ""
        assert (ours["text"].strip(), ours["reasoning"].strip()) == _strip_think_spans(sdk["text"])
    elif case_id in REFUSAL_CASES:
        # PicoBot's rule: a refusal is the answer text (the SDK keeps it in `refusal`).
        assert sdk["refusal"] and ours["text"] == sdk["text"] + sdk["refusal"]
        assert ours["reasoning"] == sdk["reasoning"]
    else:
        assert ours["text"] == sdk["text"]
        assert ours["reasoning"] == sdk["reasoning"]


async def test_in_band_error_stops_both_with_the_partial_text_and_the_message() -> None:
    case = load_case("SC-18")
    response = SSEResponse(case.status, case.headers, split_events(case.body))
    async with LocalSSEServer([response, response]) as server:
        ours = await _ours(case, server)
        text: list[str] = []
        async with AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0) as client:
            stream = await client.chat.completions.create(model="test-model", messages=PROMPT, stream=True)
            with pytest.raises(APIError) as info:
                async for chunk in stream:
                    text += [c.delta.content for c in chunk.choices if c.delta.content]
    assert ours["error"] is not None and ours["error"]["kind"] == "provider_error"
    assert ours["error"]["message"] == info.value.message
    assert ours["text"] == "".join(text)


async def test_rate_limit_is_an_error_with_the_same_status_and_message() -> None:
    case = load_case("SC-21")
    response = SSEResponse(case.status, case.headers, [case.body])
    async with LocalSSEServer([response, response]) as server:
        ours = await _ours(case, server)
        async with AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0) as client:
            with pytest.raises(RateLimitError) as info:
                await client.chat.completions.create(model="test-model", messages=PROMPT, stream=True)
    assert ours["error"] is not None and ours["error"]["kind"] == "rate_limited"
    assert ours["error"]["http_status"] == info.value.status_code == 429
    assert ours["error"]["message"] in info.value.message
