"""Replay state through the whole gateway (seed 003 §6.2, §7.3).

A real AnthropicProvider / OpenAICompatProvider talks HTTP to LocalSSEServer; the WebSocket
consumer, channel layer, agent worker, executor and storage are the real ones. What the next
request carries is read from the bytes the server received.
"""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async

from conversations.models import Message
from providers.anthropic import AnthropicProvider
from providers.openai_compat import OpenAICompatProvider
from providers.testing import LocalSSEServer, SSEResponse, openai_events, split_every, sse_body
from tests.conversations.conftest import make_token
from tests.conversations.streams import CALL_ID, answer_pieces, text_pieces, tool_call_pieces

pytestmark = [pytest.mark.django_db(transaction=True)]

THINKING = "The user asks for the time. I must call current_time; no other tool fits."
SIGNATURE = "RXF1aXZhbGVudC1zaWduYXR1cmUtbm90LXJlYWw+Lz0=" * 3  # '+', '/', '=' must survive verbatim
REDACTED = "RVhBTVBMRS1SRURBQ1RFRC1QQVlMT0FELWdhdGV3YXk="
TOOL_ID = "toolu_01TimeCall"
ANSWER = "It is 10:42 UTC."


def _event(kind: str, **fields: object) -> tuple[str, dict]:
    return kind, {"type": kind, **fields}


def _message_start(input_tokens: int) -> tuple[str, dict]:
    message = {
        "id": "msg_gw",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    return _event("message_start", message=message)


def _delta(index: int, **delta: object) -> tuple[str, dict]:
    return _event("content_block_delta", index=index, delta=delta)


def thinking_tool_use_body() -> bytes:
    """Signed thinking, a redacted block, a line of text, then a ``current_time`` tool use."""
    events = [
        _message_start(120),
        _event(
            "content_block_start",
            index=0,
            content_block={"type": "thinking", "thinking": "", "signature": ""},
        ),
        _event("ping"),
        _delta(0, type="thinking_delta", thinking=THINKING[:30]),
        _delta(0, type="thinking_delta", thinking=THINKING[30:]),
        _delta(0, type="signature_delta", signature=SIGNATURE[:50]),
        _delta(0, type="signature_delta", signature=SIGNATURE[50:]),
        _event("content_block_stop", index=0),
        _event("content_block_start", index=1, content_block={"type": "redacted_thinking", "data": REDACTED}),
        _event("content_block_stop", index=1),
        _event("content_block_start", index=2, content_block={"type": "text", "text": ""}),
        _delta(2, type="text_delta", text="Let me check the clock."),
        _event("content_block_stop", index=2),
        _event(
            "content_block_start",
            index=3,
            content_block={"type": "tool_use", "id": TOOL_ID, "name": "current_time", "input": {}},
        ),
        _delta(3, type="input_json_delta", partial_json=""),
        _delta(3, type="input_json_delta", partial_json='{"timezone": '),
        _delta(3, type="input_json_delta", partial_json='"UTC"}'),
        _event("content_block_stop", index=3),
        _event(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 88},
        ),
        _event("message_stop"),
    ]
    return sse_body(events)


def text_body(text: str) -> bytes:
    return sse_body(
        [
            _message_start(200),
            _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            _delta(0, type="text_delta", text=text),
            _event("content_block_stop", index=0),
            _event(
                "message_delta",
                delta={"stop_reason": "end_turn", "stop_sequence": None},
                usage={"output_tokens": 9},
            ),
            _event("message_stop"),
        ]
    )


def streamed(body: bytes) -> SSEResponse:
    return SSEResponse(pieces=split_every(body, 97))  # reads split events and base64 signatures


EXPECTED_REPLAY = [
    {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
    {"type": "redacted_thinking", "data": REDACTED},
    {"type": "text", "text": "Let me check the clock."},
    {"type": "tool_use", "id": TOOL_ID, "name": "current_time", "input": {"timezone": "UTC"}},
]


@database_sync_to_async
def assistant_rows() -> list[Message]:
    return list(Message.objects.filter(role="assistant").order_by("seq"))


async def test_anthropic_signed_thinking_and_tool_use_round_trip_through_the_gateway(connect, start_worker):
    async with LocalSSEServer([streamed(thinking_tool_use_body()), streamed(text_body(ANSWER))]) as server:
        provider = AnthropicProvider(
            server.url, "sk-ant-test", "claude-test", max_retries=0, thinking_budget=2048
        )
        await start_worker(provider)
        client = await connect(await make_token())
        ready = await client.until("ready")
        assert ready["provider"]["name"] == "anthropic"
        await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "a-1"})
        committed = await client.until("turn_committed")

    first, second = server.recorded
    assert first.path == second.path == "/v1/messages"
    assert second.headers["x-api-key"] == "sk-ant-test" and second.headers["anthropic-version"]
    body = second.json()
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    # The thinking block with its signature, unchanged, before the tool use.
    assert body["messages"][1]["content"] == EXPECTED_REPLAY
    assert body["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": TOOL_ID,
            "content": body["messages"][2]["content"][0]["content"],
        }
    ]
    assert SIGNATURE in second.body.decode()  # byte-exact in the request, not re-encoded

    final = [f for f in client.of_type("turn_updated") if f["turn"]["status"] == "completed"][-1]["turn"]
    assert "".join(b["text"] for b in final["blocks"] if b["type"] == "assistant").endswith(ANSWER)
    assert THINKING in " ".join(b["text"] for b in final["blocks"] if b["type"] == "reasoning")
    assert [r["role"] for r in committed["messages"]] == ["user", "assistant", "tool", "assistant"]

    # provider_state is persisted with the tool-call message ...
    rows = await assistant_rows()
    assert rows[0].provider_state == {
        "provider": "anthropic",
        "endpoint": server.url.removeprefix("http://"),
        "blocks": [
            {"type": "thinking", "text": THINKING, "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": REDACTED},
            {"type": "text", "chars": len("Let me check the clock.")},
            {"type": "tool_use", "id": TOOL_ID},
        ],
    }
    assert rows[0].reasoning_content == THINKING and rows[1].provider_state is None

    # ... and never leaves the server, in any frame (live, committed, history).
    await client.send({"type": "history", "session_id": ready["active_session_id"]})
    await client.until("session_history")
    wire = json.dumps(client.frames)
    assert SIGNATURE[:40] not in wire and REDACTED not in wire and "provider_state" not in wire


async def test_signed_thinking_is_replayed_from_the_database_to_the_same_provider_only(connect, start_worker):
    responses = [
        streamed(thinking_tool_use_body()),
        streamed(text_body(ANSWER)),
        streamed(text_body("Again.")),
    ]
    async with LocalSSEServer(responses) as anthropic_server:
        anthropic = AnthropicProvider(anthropic_server.url, "k", "claude-test", max_retries=0)
        worker = await start_worker(anthropic)
        token = await make_token()
        client = await connect(token)
        await client.until("ready")
        await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "x-1"})
        await client.until("turn_committed")
        # The next turn reads the history back from the database: the same blocks, in order.
        await client.send({"type": "message", "content": "And now?", "client_msg_id": "x-2"})
        await client.until("turn_committed")
        await worker.stop(timeout=5)
    third = anthropic_server.requests[2]
    assert third["messages"][1]["content"] == EXPECTED_REPLAY

    # The operator switches to an OpenAI-compatible provider: nothing signed or redacted goes there
    # (seed 003 §6.2 "never to a different provider"), and the tool chain stays valid.
    async with LocalSSEServer([SSEResponse(pieces=text_pieces("Switched."))]) as openai_server:
        await start_worker(OpenAICompatProvider(openai_server.base_url, "k", "gpt-test", max_retries=0))
        await client.send({"type": "message", "content": "Still there?", "client_msg_id": "x-3"})
        await client.until("turn_committed", lambda f: f["messages"][-1]["content"] == "Switched.")
    raw = openai_server.recorded[0].body.decode()
    for secret in (SIGNATURE[:40], REDACTED, THINKING[:40], "redacted", "signature", "reasoning_content"):
        assert secret not in raw
    messages = openai_server.requests[0]["messages"]
    tool_call = next(m for m in messages if m.get("tool_calls"))
    assert tool_call == {
        "role": "assistant",
        "content": "Let me check the clock.",
        "tool_calls": [
            {
                "id": TOOL_ID,
                "type": "function",
                "function": {"name": "current_time", "arguments": '{"timezone": "UTC"}'},
            }
        ],
    }
    assert messages[messages.index(tool_call) + 1]["tool_call_id"] == TOOL_ID


async def test_deepseek_reasoning_content_goes_back_with_the_tool_call_in_every_later_request(
    connect, start_worker
):
    pieces = [tool_call_pieces(), answer_pieces(), text_pieces("Later answer.")]
    async with LocalSSEServer([SSEResponse(pieces=p) for p in pieces]) as server:
        await start_worker(OpenAICompatProvider(server.base_url, "k", "deepseek-test", max_retries=0))
        client = await connect(await make_token())
        await client.until("ready")
        await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "d-1"})
        await client.until("turn_committed")
        await client.send({"type": "message", "content": "Thanks", "client_msg_id": "d-2"})
        await client.until("turn_committed")

    reasoning = "The user wants the time. I should call current_time."
    # The second request of the tool turn carries the first response's reasoning_content ...
    second = server.requests[1]["messages"]
    assert second[-2]["tool_calls"][0]["id"] == CALL_ID
    assert second[-2]["reasoning_content"] == reasoning
    # ... and so does the next turn's request, rebuilt from the database (DeepSeek answers 400
    # when a tool-call turn's reasoning is missing), while the plain answer's reasoning is not sent.
    third = server.requests[2]["messages"]
    assistants = [m for m in third if m["role"] == "assistant"]
    assert assistants[0]["reasoning_content"] == reasoning
    assert "reasoning_content" not in assistants[1] and "<think>" not in assistants[1]["content"]
    rows = await assistant_rows()
    assert rows[0].provider_state == {
        "provider": "openai",
        "endpoint": server.base_url.removeprefix("http://"),
        "reasoning_field": "reasoning_content",
    }


async def test_reasoning_replay_can_be_switched_off_per_provider(connect, start_worker):
    async with LocalSSEServer(
        [SSEResponse(pieces=tool_call_pieces()), SSEResponse(pieces=answer_pieces())]
    ) as server:
        provider = OpenAICompatProvider(server.base_url, "k", "m", max_retries=0, replay_reasoning=False)
        await start_worker(provider)
        client = await connect(await make_token())
        await client.until("ready")
        await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "o-1"})
        await client.until("turn_committed")
    assert server.requests[1]["messages"][-2]["tool_calls"][0]["id"] == CALL_ID
    assert all("reasoning_content" not in m for m in server.requests[1]["messages"])


async def test_deepseek_reasoning_is_never_sent_to_the_next_openai_compatible_endpoint(connect, start_worker):
    # Both providers are named "openai"; replay state is keyed by the endpoint (seed 003 §6.2).
    pieces = [tool_call_pieces(), answer_pieces()]
    async with LocalSSEServer([SSEResponse(pieces=p) for p in pieces]) as deepseek:
        worker = await start_worker(
            OpenAICompatProvider(deepseek.base_url, "k", "deepseek-chat", max_retries=0)
        )
        client = await connect(await make_token())
        await client.until("ready")
        await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "s-1"})
        await client.until("turn_committed")
        await worker.stop(timeout=5)
    assert deepseek.requests[1]["messages"][-2]["reasoning_content"]

    async with LocalSSEServer([SSEResponse(pieces=text_pieces("Switched."))]) as openai_server:
        await start_worker(OpenAICompatProvider(openai_server.base_url, "k", "gpt-test", max_retries=0))
        await client.send({"type": "message", "content": "Still there?", "client_msg_id": "s-2"})
        await client.until("turn_committed", lambda f: f["messages"][-1]["content"] == "Switched.")
    raw = openai_server.recorded[0].body.decode()
    assert "reasoning_content" not in raw and "I should call current_time" not in raw
    assistant = next(m for m in openai_server.requests[0]["messages"] if m.get("tool_calls"))
    assert assistant["tool_calls"][0]["id"] == CALL_ID


async def test_signed_thinking_is_never_sent_to_another_anthropic_compatible_endpoint(connect, start_worker):
    async with LocalSSEServer([streamed(thinking_tool_use_body()), streamed(text_body(ANSWER))]) as anthropic:
        worker = await start_worker(AnthropicProvider(anthropic.url, "k", "claude-test", max_retries=0))
        client = await connect(await make_token())
        await client.until("ready")
        await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "c-1"})
        await client.until("turn_committed")
        await worker.stop(timeout=5)
    async with LocalSSEServer([streamed(text_body("Other API."))]) as compatible:
        await start_worker(
            AnthropicProvider(compatible.url + "/anthropic", "k", "claude-test", max_retries=0)
        )
        await client.send({"type": "message", "content": "Still there?", "client_msg_id": "c-2"})
        await client.until("turn_committed", lambda f: f["messages"][-1]["content"] == "Other API.")
    raw = compatible.recorded[0].body.decode()
    for secret in (SIGNATURE[:40], REDACTED, THINKING[:40], "thinking"):
        assert secret not in raw
    assert compatible.requests[0]["messages"][1]["content"] == EXPECTED_REPLAY[2:]


SIG_2 = "U2Vjb25kU2lnbmF0dXJlK3dpdGgvc2xhc2hlcz0=" * 2


def interleaved_body() -> bytes:
    """Interleaved thinking: thinking, text, thinking, tool_use (the order must survive replay)."""
    return sse_body(
        [
            _message_start(120),
            _event(
                "content_block_start",
                index=0,
                content_block={"type": "thinking", "thinking": "", "signature": ""},
            ),
            _delta(0, type="thinking_delta", thinking=THINKING),
            _delta(0, type="signature_delta", signature=SIGNATURE),
            _event("content_block_stop", index=0),
            _event("content_block_start", index=1, content_block={"type": "text", "text": ""}),
            _delta(1, type="text_delta", text="Let me check the clock."),
            _event("content_block_stop", index=1),
            _event(
                "content_block_start",
                index=2,
                content_block={"type": "thinking", "thinking": "", "signature": ""},
            ),
            _delta(2, type="thinking_delta", thinking="UTC is the default."),
            _delta(2, type="signature_delta", signature=SIG_2),
            _event("content_block_stop", index=2),
            _event(
                "content_block_start",
                index=3,
                content_block={"type": "tool_use", "id": TOOL_ID, "name": "current_time", "input": {}},
            ),
            _delta(3, type="input_json_delta", partial_json='{"timezone": "UTC"}'),
            _event("content_block_stop", index=3),
            _event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 60}),
            _event("message_stop"),
        ]
    )


INTERLEAVED_REPLAY = [
    {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
    {"type": "text", "text": "Let me check the clock."},
    {"type": "thinking", "thinking": "UTC is the default.", "signature": SIG_2},
    {"type": "tool_use", "id": TOOL_ID, "name": "current_time", "input": {"timezone": "UTC"}},
]


async def test_interleaved_thinking_keeps_its_block_order_in_the_turn_and_from_the_database(
    connect, start_worker
):
    responses = [streamed(interleaved_body()), streamed(text_body(ANSWER)), streamed(text_body("Again."))]
    async with LocalSSEServer(responses) as server:
        await start_worker(
            AnthropicProvider(server.url, "k", "claude-test", max_retries=0, thinking_budget=1024)
        )
        client = await connect(await make_token())
        await client.until("ready")
        await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "i-1"})
        await client.until("turn_committed")
        await client.send({"type": "message", "content": "And now?", "client_msg_id": "i-2"})
        await client.until("turn_committed")
    # The second request of the turn, then the next turn's request rebuilt from the database.
    assert server.requests[1]["messages"][1]["content"] == INTERLEAVED_REPLAY
    assert server.requests[2]["messages"][1]["content"] == INTERLEAVED_REPLAY
    rows = await assistant_rows()
    assert (rows[0].content, rows[0].reasoning_content) == (
        "Let me check the clock.",
        THINKING + "UTC is the default.",
    )


async def test_invalid_tool_arguments_go_back_to_the_model_raw_and_stay_an_object_for_clients(
    connect, start_worker
):
    broken = '{"timezone": "UT'
    first = sse_body(openai_events(tool_calls=[(CALL_ID, "current_time", broken)]))
    later = [SSEResponse(pieces=answer_pieces()), SSEResponse(pieces=text_pieces("Later."))]
    async with LocalSSEServer([SSEResponse(pieces=split_every(first, 29)), *later]) as server:
        await start_worker(OpenAICompatProvider(server.base_url, "k", "m", max_retries=0))
        client = await connect(await make_token())
        ready = await client.until("ready")
        await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "b-1"})
        committed = await client.until("turn_committed")
        await client.send({"type": "message", "content": "Thanks", "client_msg_id": "b-2"})
        await client.until("turn_committed")
        await client.send({"type": "history", "session_id": ready["active_session_id"]})
        await client.until("session_history")

    # The next request of the turn carries what the model actually sent, next to the error result.
    second = server.requests[1]["messages"]
    call_message = next(m for m in second if m.get("tool_calls"))
    assert call_message["tool_calls"][0]["id"] == CALL_ID
    assert call_message["tool_calls"][0]["function"]["arguments"] == broken
    result = second[second.index(call_message) + 1]
    assert (
        result["role"] == "tool"
        and result["tool_call_id"] == CALL_ID
        and "invalid arguments JSON" in result["content"]
    )
    # ... and so does the next turn, rebuilt from the database.
    third = next(m for m in server.requests[2]["messages"] if m.get("tool_calls"))
    assert third["tool_calls"][0]["function"]["arguments"] == broken

    rows = await database_sync_to_async(lambda: list(Message.objects.order_by("seq")))()
    assert rows[1].tool_calls == [
        {"id": CALL_ID, "name": "current_time", "arguments": {}, "raw_arguments": broken}
    ]
    assert rows[2].role == "tool" and rows[2].is_error
    # Clients get PROTOCOL's object arguments; the raw text stays on the server.
    assert committed["messages"][1]["tool_calls"] == [
        {"id": CALL_ID, "name": "current_time", "arguments": {}}
    ]
    assert "raw_arguments" not in json.dumps(client.frames)
