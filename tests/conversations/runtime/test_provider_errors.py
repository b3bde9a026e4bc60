"""Provider error paths through the whole gateway over real HTTP.

Each test points a real OpenAICompatProvider (small timeouts, fast backoff) at LocalSSEServer,
sends one message over the WebSocket and checks three things: what the user saw (the terminal
snapshot and its error), what the server received (how many attempts), and what the database
holds — the user message, the partial answer as ``interrupted`` when text was shown, and
nothing else of the failed call (seed 003 §14.2, PROTOCOL §1).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async

from conversations.models import Dialog, InboxMessage, Message
from providers.hooks import Block, HookContext
from providers.openai_compat import OpenAICompatProvider
from providers.testing import LocalSSEServer, SSEResponse, openai_events, split_events, sse_body
from tests.conversations.conftest import make_token
from tests.conversations.streams import CALL_ID, tool_call_pieces

pytestmark = [pytest.mark.django_db(transaction=True)]

ANSWER = "The answer arrives in one piece."
IDLE_TIMEOUT = 0.3


def provider_for(server: LocalSSEServer, *, max_retries: int = 2) -> OpenAICompatProvider:
    """The PICOBOT_LLM_* knobs, small: fast backoff, short first-byte and idle timeouts."""
    return OpenAICompatProvider(
        server.base_url,
        "sk-test",
        "test-model",
        max_retries=max_retries,
        retry_backoff=0.01,
        connect_timeout=2.0,
        first_byte_timeout=2.0,
        idle_timeout=IDLE_TIMEOUT,
    )


def answer(text: str = ANSWER) -> SSEResponse:
    return SSEResponse(pieces=split_events(sse_body(openai_events(text))))


def json_error(status: int, message: str, code: str | None = None, **headers: str) -> SSEResponse:
    body = json.dumps({"error": {"message": message, "type": "error", "code": code}}).encode()
    return SSEResponse(status, {"content-type": "application/json", **headers}, [body], chunked=False)


def partial_events(text: str) -> list[bytes]:
    """The first events of a streamed ``text`` answer: the role chunk, then one per word."""
    return split_events(sse_body(openai_events(text, usage=None, done=False)[:-1]))


async def run_turn(client, content: str = "Hello?") -> tuple[dict, dict]:
    """Send one message; return the terminal snapshot and the ``turn_committed`` frame."""
    await client.until("ready")
    await client.send({"type": "message", "content": content, "client_msg_id": "e-1"})
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running", timeout=15)
    committed = await client.until("turn_committed")
    return final["turn"], committed


@database_sync_to_async
def stored() -> dict:
    """Everything the database holds of the dialog's history."""
    rows = list(
        Message.objects.order_by("seq").values(
            "role", "content", "completion_status", "provider_state", "tool_calls"
        )
    )
    inbox = list(InboxMessage.objects.values_list("status", "error"))
    revisions = list(Dialog.objects.values_list("history_revision", flat=True))
    return {"rows": rows, "inbox": inbox, "revisions": revisions}


def assistant_texts(client) -> list[str]:
    """The assistant text of every snapshot the client received, in order."""
    return [
        "".join(b["text"] for b in f["turn"]["blocks"] if b["type"] == "assistant")
        for f in client.of_type("turn_updated")
    ]


async def assert_only_the_user_message_is_stored(expected_error: str) -> None:
    state = await stored()
    assert [r["role"] for r in state["rows"]] == ["user"]
    assert state["revisions"] == [1]
    [(status, error)] = state["inbox"]
    assert status == "done" and expected_error in error


async def test_401_fails_the_turn_at_once_and_stores_nothing_of_the_call(connect, start_worker):
    async with LocalSSEServer(
        [json_error(401, "Incorrect API key provided", "invalid_api_key"), answer()]
    ) as server:
        await start_worker(provider_for(server))
        turn, committed = await run_turn(await connect(await make_token()))
        assert len(server.recorded) == 1, "authentication errors are never retried"
    assert turn["status"] == "failed"
    assert "authentication" in turn["error"] and "Incorrect API key provided" in turn["error"]
    assert "sk-test" not in turn["error"]
    assert not [b for b in turn["blocks"] if b["type"] == "assistant"]
    assert [m["role"] for m in committed["messages"]] == ["user"]
    await assert_only_the_user_message_is_stored("authentication")


async def test_429_waits_for_retry_after_then_the_retry_answers(connect, start_worker):
    limited = json_error(429, "Rate limit reached", "rate_limit_exceeded", **{"retry-after": "0.4"})
    async with LocalSSEServer([limited, answer()]) as server:
        await start_worker(provider_for(server))
        client = await connect(await make_token())
        started = asyncio.get_running_loop().time()
        turn, committed = await run_turn(client)
        elapsed = asyncio.get_running_loop().time() - started
        assert len(server.recorded) == 2 and server.requests[0] == server.requests[1]
    assert elapsed >= 0.4, "Retry-After is honoured"
    assert turn["status"] == "completed" and assistant_texts(client)[-1] == ANSWER
    assert [(m["role"], m["content"]) for m in committed["messages"]][1:] == [("assistant", ANSWER)]
    state = await stored()
    assert [(r["role"], r["completion_status"]) for r in state["rows"]][1:] == [("assistant", "completed")]


async def test_429_until_the_retries_are_exhausted_fails_the_turn(connect, start_worker):
    limited = json_error(429, "Rate limit reached", "rate_limit_exceeded", **{"retry-after": "0.05"})
    async with LocalSSEServer([limited, limited, limited, answer()]) as server:
        await start_worker(provider_for(server, max_retries=2))
        turn, committed = await run_turn(await connect(await make_token()))
        assert len(server.recorded) == 3, "one attempt plus max_retries"
    assert (
        turn["status"] == "failed"
        and "rate_limited" in turn["error"]
        and "Rate limit reached" in turn["error"]
    )
    assert [m["role"] for m in committed["messages"]] == ["user"]
    await assert_only_the_user_message_is_stored("rate_limited")


@pytest.mark.parametrize(
    "first_attempt",
    [
        pytest.param(json_error(500, "The server had an error", "server_error"), id="500"),
        pytest.param(SSEResponse(pieces=partial_events("x")[:1], abort=True), id="reset-before-output"),
        pytest.param(SSEResponse(pieces=[b": keep-alive\n\n"] * 3, stall_after=3), id="stall-before-output"),
    ],
)
async def test_a_failure_before_any_output_is_retried_and_the_user_sees_one_answer(
    first_attempt, connect, start_worker
):
    async with LocalSSEServer([first_attempt, answer()]) as server:
        await start_worker(provider_for(server))
        client = await connect(await make_token())
        turn, committed = await run_turn(client)
        assert len(server.recorded) == 2
    assert turn["status"] == "completed" and not turn.get("error")
    texts = assistant_texts(client)
    assert texts[-1] == ANSWER
    assert all(ANSWER.startswith(t) for t in texts), "no snapshot ever shows a replayed prefix"
    assert [(m["role"], m["content"]) for m in committed["messages"]] == [
        ("user", "Hello?"),
        ("assistant", ANSWER),
    ]
    state = await stored()
    assert [(r["role"], r["content"], r["completion_status"]) for r in state["rows"]][1:] == [
        ("assistant", ANSWER, "completed")
    ]
    assert state["inbox"] == [("done", "")]


async def test_a_200_with_a_json_error_body_is_a_bad_response_not_an_empty_answer(connect, start_worker):
    body = (
        b'{"error":{"message":"The upstream model is temporarily unavailable.","code":"model_unavailable"}}'
    )
    ok_status_json = SSEResponse(200, {"content-type": "application/json"}, [body], chunked=False)
    async with LocalSSEServer([ok_status_json, answer()]) as server:
        await start_worker(provider_for(server))
        turn, committed = await run_turn(await connect(await make_token()))
        assert len(server.recorded) == 1
    assert turn["status"] == "failed"
    # SC-20: the provider's own words reach the user, after the kind, before the ref.
    assert turn["error"].startswith(
        "The model provider sent an unexpected answer (http_error): "
        "The upstream model is temporarily unavailable (ref "
    )
    assert [m["role"] for m in committed["messages"]] == ["user"]
    await assert_only_the_user_message_is_stored("http_error")


@pytest.mark.parametrize(
    ("broken", "kind"),
    [
        pytest.param(
            SSEResponse(pieces=partial_events("Half an answer that never ends"), stall_after=3),
            "timeout",
            id="stall-after-three-chunks",
        ),
        pytest.param(
            SSEResponse(pieces=partial_events("Half an answer that never ends")[:3], abort=True),
            "truncated",
            id="connection-reset-mid-stream",
        ),
        pytest.param(
            SSEResponse(
                pieces=[
                    *partial_events("Half an answer")[:3],
                    sse_body([{"error": {"message": "upstream crashed", "code": 502}}]),
                ]
            ),
            "provider_error",
            id="error-object-mid-stream",
        ),
    ],
)
async def test_a_failure_after_output_keeps_the_partial_answer_interrupted_and_is_not_retried(
    broken, kind, connect, start_worker
):
    async with LocalSSEServer([broken, answer("a retry would duplicate the prefix")]) as server:
        await start_worker(provider_for(server))
        client = await connect(await make_token())
        turn, committed = await run_turn(client)
        assert len(server.recorded) == 1, "output was shown: a retry would replay it"
    assert turn["status"] == "failed" and f"({kind})" in turn["error"]
    assert assistant_texts(client)[-1] == "Half an"
    assert [(m["role"], m["content"], m["completion_status"]) for m in committed["messages"]][1:] == [
        ("assistant", "Half an", "interrupted")
    ]
    state = await stored()
    assert [(r["role"], r["content"], r["completion_status"]) for r in state["rows"]][1:] == [
        ("assistant", "Half an", "interrupted")
    ]
    assert state["rows"][1]["provider_state"] is None and state["rows"][1]["tool_calls"] == []
    assert state["revisions"] == [2] and state["inbox"][0][0] == "done" and kind in state["inbox"][0][1]


async def test_a_failure_in_the_second_request_keeps_the_finished_tool_call_and_nothing_of_the_failed_one(
    connect, start_worker
):
    overloaded = json_error(503, "Service unavailable", "overloaded")
    async with LocalSSEServer([SSEResponse(pieces=tool_call_pieces()), overloaded, overloaded]) as server:
        await start_worker(provider_for(server, max_retries=1))
        turn, committed = await run_turn(await connect(await make_token()), "What time is it?")
        assert len(server.recorded) == 3
    assert turn["status"] == "failed" and "overloaded" in turn["error"]
    assert [b["status"] for b in turn["blocks"] if b["type"] == "tool"] == ["completed"]
    state = await stored()
    assert [r["role"] for r in state["rows"]] == ["user", "assistant", "tool"]
    assert state["rows"][1]["completion_status"] == "completed"
    assert state["rows"][1]["tool_calls"][0]["id"] == CALL_ID
    assert [m["role"] for m in committed["messages"]] == ["user", "assistant", "tool"]


async def test_a_pre_request_hook_that_blocks_fails_the_turn_with_its_reason(connect, start_worker):
    async with LocalSSEServer([answer()]) as server:
        provider = provider_for(server)

        async def no_passwords(ctx: HookContext) -> Block | None:
            if "password" in ctx.request.messages[-1].text:
                return Block("messages that contain passwords are not sent to the model")
            return None

        provider.hooks.pre_request(no_passwords)
        await start_worker(provider)
        turn, committed = await run_turn(await connect(await make_token()), "my password is hunter2")
        assert server.recorded == []
    assert turn["status"] == "failed"
    assert "blocked" in turn["error"] and "passwords are not sent to the model" in turn["error"]
    assert [m["role"] for m in committed["messages"]] == ["user"]
    await assert_only_the_user_message_is_stored("blocked")


@pytest.mark.parametrize(
    ("status", "lead", "kind"),
    [
        (500, "had a server error", "server_error"),
        (502, "had a server error", "server_error"),
        (504, "had a server error", "server_error"),
        (503, "is overloaded", "overloaded"),
        (529, "is overloaded", "overloaded"),
    ],
)
async def test_5xx_wording_says_server_error_and_keeps_overloaded_for_503_and_529(
    status, lead, kind, connect, start_worker
):
    async with LocalSSEServer([json_error(status, "upstream said no")]) as server:
        await start_worker(provider_for(server, max_retries=0))
        turn, _ = await run_turn(await connect(await make_token()))
    assert turn["status"] == "failed"
    # A JSON error body's message is shown for a 5xx too (issue 14), after the kind and status.
    assert turn["error"].startswith(
        f"The model provider {lead} ({kind}, HTTP {status}): upstream said no (ref "
    )
    assert ("overloaded" in turn["error"]) is (kind == "overloaded")
    await assert_only_the_user_message_is_stored(kind)
