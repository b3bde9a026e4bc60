"""REST history shows how each user message's turn ended (PROTOCOL §1 "History message" ``outcome``),
the same as the WebSocket's ``session_history``, and the OpenAPI document describes the field."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from conversations.api import api
from conversations.models import InboxMessage
from providers.errors import ProviderConnectionError
from providers.testing import ScriptedProvider, script_text
from tests.conversations.api.conftest import ApiClient

pytestmark = [pytest.mark.django_db(transaction=True)]


@database_sync_to_async
def inbox_status(message_id: str) -> str:
    return InboxMessage.objects.get(pk=message_id).status


async def send_and_wait(client: ApiClient, sid: str, content: str) -> str:
    response = await client.post(f"/dialogs/{sid}/messages", json={"content": content})
    assert response.status_code == 202, response.content
    message_id = response.json()["message_id"]
    async with asyncio.timeout(10):
        while True:
            if await inbox_status(message_id) == "done":
                return message_id
            await asyncio.sleep(0.02)


async def test_rest_history_shows_a_failed_turns_outcome_like_the_websocket(connect, start_worker, alice):
    outage = ProviderConnectionError("connect to https://llm.example/v1 failed (key sk-hunter2hunter2)")
    await start_worker(ScriptedProvider([outage, script_text("Back again")]))
    ws = await connect(alice.token)
    sid = (await ws.until("ready"))["active_session_id"]

    failed_id = await send_and_wait(alice, sid, "are you there?")
    terminal = (await ws.until("turn_updated", lambda f: f["turn"]["status"] == "failed"))["turn"]
    answered_id = await send_and_wait(alice, sid, "and now?")
    page = (await alice.get(f"/dialogs/{sid}/messages")).json()

    outcomes = {m["id"]: m["outcome"] for m in page["messages"] if m["role"] == "user"}
    assert outcomes[answered_id] is None
    failed = outcomes[failed_id]
    assert failed["status"] == "failed" and "could not be reached" in failed["error"]
    assert failed["error"] == terminal["error"], "the words the live snapshot showed"
    assert "llm.example" not in failed["error"] and "hunter2" not in failed["error"]
    assert all(m["outcome"] is None for m in page["messages"] if m["role"] != "user")
    await ws.send({"type": "history", "session_id": sid})
    assert (await ws.until("session_history"))["messages"] == page["messages"]


def test_the_openapi_document_describes_the_outcome_of_a_history_message():
    schemas = api.get_openapi_schema()["components"]["schemas"]
    outcome = schemas["HistoryMessage"]["properties"]["outcome"]
    assert {"$ref": "#/components/schemas/TurnOutcomeOut"} in outcome["anyOf"]
    assert schemas["TurnOutcomeOut"]["properties"]["status"]["enum"] == ["failed", "interrupted", "cancelled"]
    assert set(schemas["TurnOutcomeOut"]["required"]) == {"status", "error"}
