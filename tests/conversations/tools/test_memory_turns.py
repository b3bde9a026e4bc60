"""Memory through real turns (seed 000 §7.1): a ``memory_save`` call in one turn is recalled into a
later turn's runtime context, for the same owner only."""

from __future__ import annotations

import pytest

from providers.messages import RUNTIME_CONTEXT_MARKER
from providers.testing import ScriptedProvider, script_text, script_tool_call
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]


async def test_a_saved_memory_is_recalled_in_a_later_turn_of_its_owner_only(connect, start_worker):
    provider = ScriptedProvider(
        [
            script_tool_call(
                "call-mem", "memory_save", {"content": "The user's cat is called Miso", "tags": ["pets"]}
            ),
            script_text("Noted."),
            script_text("Miso!"),
            script_text("I don't know."),
        ]
    )
    await start_worker(provider)
    alice = await connect(await make_token("alice"))
    await alice.until("ready")
    await alice.send({"type": "message", "content": "Remember: my cat is Miso", "client_msg_id": "m-1"})
    committed = await alice.until("turn_committed")
    tool_row = [m for m in committed["messages"] if m["role"] == "tool"][0]
    assert tool_row["is_error"] is False, tool_row["content"]

    await alice.send({"type": "message", "content": "What is my cat called?", "client_msg_id": "m-2"})
    await alice.until("turn_committed", lambda f: f["messages"][0]["content"] == "What is my cat called?")
    last_user = [m for m in provider.requests[-1].messages if m.role == "user"][-1].text
    assert RUNTIME_CONTEXT_MARKER in last_user and "Miso" in last_user.split(RUNTIME_CONTEXT_MARKER, 1)[1]

    bob = await connect(await make_token("bob"))
    await bob.until("ready")
    await bob.send({"type": "message", "content": "What is my cat called?", "client_msg_id": "b-1"})
    await bob.until("turn_committed")
    bobs = [m for m in provider.requests[-1].messages if m.role == "user"][-1].text
    assert "Miso" not in bobs, "another owner's memory never leaks"
