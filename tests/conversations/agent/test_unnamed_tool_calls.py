"""A tool call with an empty, blank or malformed name (QA 6c).

The OpenAI parser failed a nameless call's stream, so the turn ended as "provider (http_error)";
and a name outside OpenAI's ``^[a-zA-Z0-9_-]{1,64}$`` in history makes every later request of the
dialog refused with HTTP 400. Now a nameless call gets an error result the model can read ("a
tool call needs a name") and is kept as ``unnamed_tool``; a malformed name is kept as written
(and gets "unknown tool …"), and every request sends ``unnamed_tool`` for it — so a strict
OpenAI-style upstream accepts the next request, and the next turn's.
"""

from __future__ import annotations

import json
import re

import pytest
from channels.db import database_sync_to_async

from conversations.models import Message
from providers._anthropic_request import build_messages_request
from providers._openai_request import build_chat_request
from providers.blocks import UNNAMED_TOOL, ToolUseBlock, sendable_tool_name
from providers.messages import Message as ProviderMessage
from providers.openai_compat import OpenAICompatProvider
from providers.testing import LocalSSEServer, RecordedRequest, SSEResponse
from providers.types import ProviderRequest
from tests.conversations.conftest import make_token
from tests.conversations.streams import DONE, _chunk, text_pieces

NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
ANSWER = "Sorry, let me answer directly."


def call_pieces(name: str | None) -> list[bytes]:
    function = {"arguments": "{}"} if name is None else {"name": name, "arguments": "{}"}
    return [
        _chunk({"role": "assistant", "content": None}),
        _chunk(
            {"tool_calls": [{"index": 0, "id": "call_nameless", "type": "function", "function": function}]}
        ),
        _chunk({}, "tool_calls"),
        DONE,
    ]


class StrictNames:
    """An OpenAI-style upstream: HTTP 400 (OpenAI's wording) for a history call whose function
    name breaks its pattern; else the first request gets ``first``, every later one an answer."""

    def __init__(self, first: list[bytes]) -> None:
        self.first = first
        self.rejected: list[str] = []
        self.seen = 0

    def __call__(self, request: RecordedRequest) -> SSEResponse:
        body = request.json() or {}
        for i, message in enumerate(body.get("messages", [])):
            for call in message.get("tool_calls") or []:
                name = call.get("function", {}).get("name")
                if not isinstance(name, str) or not NAME.fullmatch(name):
                    error = (
                        f"Invalid 'messages[{i}].tool_calls[0].function.name': string does not match pattern."
                    )
                    self.rejected.append(error)
                    payload = {
                        "error": {"message": error, "type": "invalid_request_error", "code": "invalid_value"}
                    }
                    return SSEResponse(
                        400,
                        {"content-type": "application/json"},
                        [json.dumps(payload).encode()],
                        chunked=False,
                    )
        self.seen += 1
        return SSEResponse(pieces=self.first if self.seen == 1 else text_pieces(ANSWER))


@database_sync_to_async
def stored() -> list[tuple]:
    return list(
        Message.objects.order_by("seq").values_list("role", "content", "tool_calls", "tool_name", "is_error")
    )


@pytest.mark.parametrize(
    ("name", "kept", "error"),
    [
        (None, UNNAMED_TOOL, "Error: a tool call needs a name"),
        ("", UNNAMED_TOOL, "Error: a tool call needs a name"),
        ("   ", UNNAMED_TOOL, "Error: a tool call needs a name"),
        ("functions.current_time", "functions.current_time", "Error: unknown tool 'functions.current_time'"),
    ],
    ids=["missing", "empty", "blank", "dotted"],
)
@pytest.mark.django_db(transaction=True)
async def test_a_call_without_a_usable_name_gets_an_error_result_and_history_stays_valid(
    name, kept, error, connect, start_worker
):
    upstream = StrictNames(call_pieces(name))
    async with LocalSSEServer(handler=upstream) as server:
        await start_worker(OpenAICompatProvider(server.base_url, "test-key", "test-model", max_retries=0))
        client = await connect(await make_token())
        await client.until("ready")
        await client.send({"type": "message", "content": "What time is it?", "client_msg_id": "nameless-1"})
        first = (await client.until("turn_updated", lambda f: f["turn"]["status"] != "running"))["turn"]
        await client.until("turn_committed")
        await client.send({"type": "message", "content": "And now?", "client_msg_id": "nameless-2"})
        second = (
            await client.until(
                "turn_updated", lambda f: f["turn"]["status"] != "running" and f["turn"]["id"] != first["id"]
            )
        )["turn"]
        await client.until(
            "turn_committed", lambda f: f["messages"][-1]["content"] == ANSWER and len(f["messages"]) == 2
        )

    assert first["status"] == "completed", first["error"]
    assert second["status"] == "completed", second["error"]
    assert upstream.rejected == []
    [tool_block] = [b for b in first["blocks"] if b["type"] == "tool"]
    assert tool_block["name"] == kept and tool_block["status"] == "failed"
    rows = await stored()
    assert [r[0] for r in rows] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert [c["name"] for c in rows[1][2]] == [kept]
    role, content, _, tool_name, is_error = rows[2]
    assert content.startswith(error) and tool_name == kept and is_error
    for later in (server.recorded[1], server.recorded[2]):  # the turn's second request, the next turn's
        sent_back = later.json()["messages"]
        assert [c["function"]["name"] for m in sent_back for c in m.get("tool_calls") or []] == [UNNAMED_TOOL]
        assert [m["content"] for m in sent_back if m["role"] == "tool"] == [content]


@pytest.mark.parametrize(
    ("name", "sent"),
    [
        ("current_time", "current_time"),
        ("get-time_2", "get-time_2"),
        ("", UNNAMED_TOOL),
        (" ", UNNAMED_TOOL),
        ("functions.x", UNNAMED_TOOL),
        ("a" * 65, UNNAMED_TOOL),
        ("zeit_ä", UNNAMED_TOOL),
    ],
)
def test_sendable_tool_name_keeps_names_providers_accept_and_replaces_the_rest(name, sent):
    assert sendable_tool_name(name) == sent


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_both_request_mappers_send_a_malformed_name_from_history_as_the_placeholder(vendor):
    history = [
        ProviderMessage.user("What time is it?"),
        ProviderMessage.assistant(
            "", tool_calls=[ToolUseBlock("c1", "functions.time", {}), ToolUseBlock("c2", "clock", {})]
        ),
        ProviderMessage.tool_result("c1", "Error: unknown tool", is_error=True, tool_name="functions.time"),
        ProviderMessage.tool_result("c2", "10:42", tool_name="clock"),
    ]
    request = ProviderRequest(messages=history)
    if vendor == "openai":
        body = build_chat_request(request, model="m")
        names = [c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or []]
    else:
        body = build_messages_request(request, model="m")
        names = [
            b["name"]
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_use"
        ]
    assert names == [UNNAMED_TOOL, "clock"]
