"""Answers cut off at the provider's output limit are marked ``truncated`` (PROTOCOL §1).

The case streams SC-11 (text, ``finish_reason: "length"``) and SC-05 (reasoning only, cut at the
limit) are served over real HTTP to a real OpenAICompatProvider; Anthropic's ``max_tokens`` and a
normal stop go through the scripted provider. What is checked: the terminal snapshot's
``truncated``, the committed assistant row (``turn_committed``, REST history, the database), and
that a reasoning-only row stays out of the next provider request.
"""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from conversations.context.history import row_to_message
from conversations.models import Message
from providers.testing import LocalSSEServer, ScriptedProvider, SSEResponse, script_text
from tests.conversations.conftest import make_token
from tests.conversations.runtime.test_provider_errors import provider_for, run_turn
from tests.providers._cases import load_case

pytestmark = [pytest.mark.django_db(transaction=True)]


def case_response(case_id: str) -> SSEResponse:
    case = load_case(case_id)
    return SSEResponse(case.status, case.headers or {"content-type": "text/event-stream"}, [case.body])


@database_sync_to_async
def assistant_rows() -> list[dict]:
    return list(
        Message.objects.filter(role="assistant")
        .order_by("seq")
        .values("content", "reasoning_content", "truncated", "completion_status")
    )


async def test_sc11_an_answer_cut_at_the_output_limit_is_marked_truncated(
    connect, start_worker, async_client
):
    async with LocalSSEServer([case_response("SC-11")]) as server:
        await start_worker(provider_for(server))
        token = await make_token()
        turn, committed = await run_turn(await connect(token))
    assert turn["status"] == "completed" and turn["truncated"] is True
    [reply] = [m for m in committed["messages"] if m["role"] == "assistant"]
    assert reply["content"] == "The answer is 42." and reply["truncated"] is True
    assert [m["truncated"] for m in committed["messages"] if m["role"] == "user"] == [False]
    assert await assistant_rows() == [
        {
            "content": "The answer is 42.",
            "reasoning_content": None,
            "truncated": True,
            "completion_status": "completed",
        }
    ]
    response = await async_client.get(
        f"/api/dialogs/{turn['session_id']}/messages", headers={"Authorization": f"Bearer {token}"}
    )
    page = response.json()
    assert [m["truncated"] for m in page["messages"]] == [False, True]


async def test_sc05_reasoning_cut_at_the_limit_is_kept_visible_and_not_sent_back(connect, start_worker):
    async with LocalSSEServer([case_response("SC-05")]) as server:
        await start_worker(provider_for(server))
        turn, committed = await run_turn(await connect(await make_token()))
    assert turn["status"] == "completed" and turn["truncated"] is True
    [reply] = [m for m in committed["messages"] if m["role"] == "assistant"]
    reasoning = load_case("SC-05").expected["reasoning"]
    assert reply["content"] == "" and reply["reasoning"] == reasoning and reply["truncated"] is True
    assert row_to_message(reply) is None, "reasoning alone is never sent back to the model"


@pytest.mark.parametrize(
    ("finish_reason", "truncated"),
    [("max_tokens", True), ("MAX_TOKENS", True), ("end_turn", False), ("stop", False), ("tool_calls", False)],
)
async def test_only_an_output_limit_stop_marks_the_turn(connect, start_worker, finish_reason, truncated):
    await start_worker(ScriptedProvider([script_text("Partly.", finish_reason=finish_reason)]))
    turn, committed = await run_turn(await connect(await make_token()))
    assert turn["status"] == "completed"
    assert turn.get("truncated", False) is truncated and ("truncated" in turn) is truncated
    [reply] = [m for m in committed["messages"] if m["role"] == "assistant"]
    assert reply["truncated"] is truncated
