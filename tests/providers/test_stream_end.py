"""How a stream ends, through the real providers (read whole, per event and byte by byte).

``finish_reason: "error"`` without an error object, and an empty error object mid-stream, are
in-band errors (a null one is not); Anthropic's ``message_stop`` fails a ``tool_use`` block
still open (no call is emitted) and closes an open text block; a stream with no content and no
stop reason is empty; an answer whose terminal event arrived survives a reset or a stall after
it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx2
import pytest

from providers.testing import sse_body
from tests.providers._cases import run_stream
from tests.providers._mock_sse import (
    MS,
    MSTOP,
    ROLE,
    SSE,
    _provider,
    _transport,
    all_modes,
    bd,
    bs,
    md,
    oc,
    st,
)


async def test_finish_reason_error_without_an_error_object_is_an_in_band_error() -> None:
    body = sse_body([ROLE, oc({"content": "partial"}), oc({}, "error"), "[DONE]"])
    for mode, result, _ in await all_modes(body):
        assert result.error is not None and result.error.kind == "provider_error", mode
        assert (result.text, result.finish_reason) == ("partial", "error"), mode


async def test_an_empty_error_object_mid_stream_is_still_an_error_but_a_null_one_is_not():
    ok_chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "Hi"}}],
    }
    failing = sse_body([{**ok_chunk, "error": None}, {"error": {}}, "[DONE]"])
    for mode, result, _ in await all_modes(failing):
        assert result.error is not None and result.error.kind == "provider_error", mode
        assert result.text == "Hi", mode
    fine = sse_body(
        [
            {**ok_chunk, "error": None},
            {**ok_chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            "[DONE]",
        ]
    )
    for mode, result, _ in await all_modes(fine):
        assert result.error is None and result.text == "Hi", mode


async def test_anthropic_message_stop_with_an_open_tool_use_fails_and_emits_no_call() -> None:
    body = sse_body(
        [
            MS,
            bs(0, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}),
            bd(0, {"type": "input_json_delta", "partial_json": '{"path": "no'}),
            md("tool_use"),
            MSTOP,
        ]
    )
    for mode, result, _ in await all_modes(body, "anthropic"):
        assert result.error is not None and result.error.kind == "truncated", mode
        assert result.tool_calls == [], mode


async def test_anthropic_message_stop_closes_an_open_text_block() -> None:
    body = sse_body(
        [MS, bs(0, {"type": "text", "text": ""}), bd(0, {"type": "text_delta", "text": "Hi"}), MSTOP]
    )
    for mode, result, _ in await all_modes(body, "anthropic"):
        assert (result.error, result.text) == (None, "Hi"), mode


async def test_anthropic_stream_with_no_content_and_no_stop_reason_is_empty() -> None:
    body = sse_body([MS, ("ping", {"type": "ping"}), MSTOP])
    for mode, result, _ in await all_modes(body, "anthropic"):
        assert result.error is not None and "empty stream" in result.error.message, mode


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
@pytest.mark.parametrize("how", ["reset", "stall"])
async def test_a_complete_answer_survives_a_reset_or_stall_after_its_terminal_event(vendor, how) -> None:
    if vendor == "openai":
        body = sse_body([ROLE, oc({"content": "full answer"}), oc({}, "stop")])
    else:
        events = [
            MS,
            bs(0, {"type": "text", "text": ""}),
            bd(0, {"type": "text_delta", "text": "full answer"}),
            st(0),
            md("end_turn"),
        ]  # noqa: E501
        body = sse_body(events)

    def broken():
        async def gen() -> AsyncIterator[bytes]:
            yield body
            if how == "stall":
                await asyncio.sleep(5)
            raise httpx2.ReadError("reset")

        return gen

    provider = _provider(vendor, _transport([(200, SSE, broken())]), idle_timeout=0.2)
    result, _ = await run_stream(provider)
    assert (result.error, result.text) == (None, "full answer")
