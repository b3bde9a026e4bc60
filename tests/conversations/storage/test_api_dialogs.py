"""Dialogs of the OpenAI-compatible endpoint in storage (issue 18): one-request dialogs seeded
with history and never listed, named dialogs found by id or title, a turn's own preset and
instructions, withdrawing a queued message, retiring a dialog once its turn ended."""

from __future__ import annotations

import pytest

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.context.history import build_turn_input, with_client_instructions
from conversations.models import InboxMessage

LEASE_MS = 30_000
API = "openai"


@pytest.fixture
def alice():
    return get_or_create_user("alice")[0]


@pytest.mark.django_db
def test_a_request_dialog_holds_its_history_and_is_never_listed(alice):
    storage.create_dialog(alice, "cli_chat", str(alice.pk), "mine")
    dialog = storage.open_request_dialog(alice, API, f"{alice.pk}.x", [("user", "a"), ("assistant", "b")])
    accepted = storage.accept_message(
        alice, API, dialog.chat_id, "c", session_id=dialog.id, model="fast", instructions="be brief"
    )
    epoch = storage.claim_lease(dialog.id, "w1", LEASE_MS)
    start = storage.start_next_turn(dialog.id, "w1", epoch)
    assert [(r["role"], r["content"], r["seq"]) for r in start.history] == [
        ("user", "a", 1),
        ("assistant", "b", 2),
        ("user", "c", 3),
    ]
    assert (start.model, start.instructions) == ("fast", "be brief")
    listed = storage.list_sessions(alice, "cli_chat", str(alice.pk))
    assert [item["title"] for item in listed] == ["mine"]
    assert storage.retire_request_dialog(dialog.id) is False  # its turn runs
    state = storage.request_turn(accepted.inbox_id)
    assert state["status"] == InboxMessage.Status.STARTED and state["turn_id"] == start.turn_id
    storage.commit_turn(
        dialog.id,
        "w1",
        epoch,
        accepted.inbox_id,
        [{"role": "assistant", "content": "d", "turn_id": start.turn_id}],
    )
    state = storage.request_turn(accepted.inbox_id)
    assert state["status"] == InboxMessage.Status.DONE
    assert [(r["role"], r["content"]) for r in state["rows"]] == [("assistant", "d")]
    assert storage.retire_request_dialog(dialog.id) is True
    with pytest.raises(storage.NotFoundError):
        storage.dialog_for_user(alice, dialog.id)


@pytest.mark.django_db
def test_a_request_dialog_refuses_other_roles(alice):
    with pytest.raises(ValueError, match="user or assistant"):
        storage.open_request_dialog(alice, API, "1.y", [("system", "x")])


@pytest.mark.django_db
def test_named_dialogs_are_found_by_id_or_title_and_created_without_becoming_active(alice):
    chat = str(alice.pk)
    active = storage.create_dialog(alice, "cli_chat", chat, "active one")
    notes, created = storage.named_dialog(alice, "cli_chat", chat, "  API   notes ")
    assert created and notes.title == "API notes"
    assert storage.active_dialog(alice, "cli_chat", chat).id == active.id
    assert storage.named_dialog(alice, "cli_chat", chat, "API notes") == (notes, False)
    assert storage.named_dialog(alice, "cli_chat", chat, notes.dialog_id) == (notes, False)
    assert storage.named_dialog(alice, "cli_chat", chat, notes.id) == (notes, False)
    with pytest.raises(storage.NotFoundError):
        storage.named_dialog(alice, "cli_chat", chat, "cli_chat:999:nothing")
    bob = get_or_create_user("bob")[0]
    with pytest.raises(storage.NotFoundError):
        storage.named_dialog(bob, "cli_chat", str(bob.pk), notes.id)
    with pytest.raises(ValueError):
        storage.named_dialog(alice, "cli_chat", chat, "x" * 500)


@pytest.mark.django_db
def test_a_queued_message_is_withdrawn_once(alice):
    dialog = storage.open_request_dialog(alice, API, "1.z", [])
    accepted = storage.accept_message(alice, API, dialog.chat_id, "c", session_id=dialog.id)
    assert storage.withdraw_queued(accepted.inbox_id) is True
    assert storage.withdraw_queued(accepted.inbox_id) is False
    state = storage.request_turn(accepted.inbox_id)
    assert (state["status"], state["outcome"], state["rows"]) == ("done", "cancelled", [])
    assert storage.request_turn("00000000-0000-0000-0000-000000000000") is None


def test_client_instructions_follow_the_system_prompt():
    assert with_client_instructions("base", "  ") == "base"
    system = with_client_instructions("base", " be brief ")
    assert system == "base\n\nInstructions from the client for this turn:\nbe brief"
    assert build_turn_input(system, [])[0].text == system
