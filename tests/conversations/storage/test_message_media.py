"""A user row's images in every protocol form of history (PROTOCOL §1 "History message" ``media``)
and one image's bytes for the REST route (``storage.message_image``).

History carries ``[{mime_type, url}]`` only: never the base64 data, and a history page does not
even read it from the database.
"""

from __future__ import annotations

import base64
from urllib.parse import quote

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.models import Dialog, Message, now_ms
from conversations.runtime.sessions import Session, SessionManager
from conversations.storage.shapes import history_row_to_protocol, media_url

pytestmark = [pytest.mark.django_db]

CHANNEL = "cli_chat"
CHAT = "chat-alice"
LEASE_MS = 15_000
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
GIF = base64.b64encode(b"GIF89a" + b"\x00" * 20).decode()
IMAGES = [{"mime_type": "image/png", "data": PNG}, {"mime_type": "image/gif", "data": GIF}]


@pytest.fixture
def alice():
    return get_or_create_user("alice")[0]


def start_turn(owner, dialog_id: str, text: str, media: list | None = None) -> tuple[int, storage.TurnStart]:
    storage.accept_message(owner, CHANNEL, CHAT, text, session_id=dialog_id, media=media)
    epoch = storage.claim_lease(dialog_id, "w1", LEASE_MS)
    start = storage.start_next_turn(dialog_id, "w1", epoch)
    assert start is not None
    return epoch, start


@pytest.fixture
def answered(alice) -> dict:
    """A dialog whose first turn sent two images and was answered, then a turn without images."""
    dialog = storage.active_dialog(alice, CHANNEL, CHAT)
    epoch, start = start_turn(alice, dialog.id, "what is this?", IMAGES)
    reply = {
        "id": start.reply_message_id,
        "role": "assistant",
        "content": "A pixel.",
        "turn_id": start.turn_id,
    }
    commit = storage.commit_turn(dialog.id, "w1", epoch, start.inbox_id, [reply], outcome="completed")
    epoch, plain = start_turn(alice, dialog.id, "thanks")
    storage.commit_turn(dialog.id, "w1", epoch, plain.inbox_id, [], outcome="completed")
    return {"dialog": dialog.id, "start": start, "commit": commit, "plain": plain.inbox_id}


def expected_media(session_id: str, message_id: str) -> list[dict]:
    base = f"/api/dialogs/{quote(session_id, safe='')}/messages/{message_id}/media"
    return [{"mime_type": "image/png", "url": f"{base}/0"}, {"mime_type": "image/gif", "url": f"{base}/1"}]


def test_the_url_encodes_the_whole_session_id():
    assert media_url("cli_chat:7:a/b", "m-1", 2) == "/api/dialogs/cli_chat%3A7%3Aa%2Fb/messages/m-1/media/2"


def test_a_user_rows_media_are_types_and_urls_never_data_and_other_rows_have_none():
    row = {"id": "m-1", "role": "user", "content": "hi", "media_refs": IMAGES}
    out = history_row_to_protocol(row, session_id="cli_chat:1:d")
    assert out["media"] == expected_media("cli_chat:1:d", "m-1")
    assert PNG not in str(out) and "media_refs" not in out
    assert history_row_to_protocol({"id": "m-2", "role": "user", "content": "hi"})["media"] == []
    answer = {"id": "m-3", "role": "assistant", "content": "x", "media_refs": IMAGES}
    assert history_row_to_protocol(answer, session_id="cli_chat:1:d")["media"] == []


def test_a_history_page_lists_each_user_rows_images(alice, answered):
    page = storage.history_page(alice, answered["dialog"])
    media = {m["id"]: m["media"] for m in page["messages"]}
    first = answered["start"].inbox_id
    assert media[first] == expected_media(answered["dialog"], first)
    assert media[answered["plain"]] == []
    assert all(m["media"] == [] for m in page["messages"] if m["role"] != "user")
    assert PNG not in str(page) and GIF not in str(page)


def test_a_history_page_never_reads_the_image_data(alice, answered):
    with CaptureQueriesContext(connection) as queries:
        storage.history_page(alice, answered["dialog"])
    page_sql = [q["sql"] for q in queries if '"conversations_message"' in q["sql"]]
    assert page_sql
    for sql in page_sql:
        assert "mime_type" in sql, "the types come from a JSON expression"
        assert "data" not in sql.replace('"conversations_message"', ""), "no image data is selected"
        assert "provider_state" not in sql
        column = '"conversations_message"."media_refs"'
        assert f"{column}," not in sql.replace(f"({column},", "") and f"{column} FROM" not in sql, (
            "the column itself is never selected"
        )


def test_turn_committed_turn_started_and_reconcile_rows_carry_the_images(alice, answered):
    first = answered["start"].inbox_id
    want = expected_media(answered["dialog"], first)
    assert answered["commit"].messages[0]["media"] == want
    assert answered["commit"].messages[1]["media"] == []
    assert answered["start"].user_message["media"] == want
    state = storage.turn_states(CHANNEL, CHAT, [first], [])[0]
    assert [m["media"] for m in state["messages"]] == [want, []]


def test_an_interrupted_turns_commit_carries_its_images(alice):
    dialog = storage.active_dialog(alice, CHANNEL, CHAT)
    _, start = start_turn(alice, dialog.id, "lost", IMAGES[:1])
    Dialog.objects.filter(pk=dialog.id).update(lease_expires_at=now_ms() - 1)
    observed = Dialog.objects.values_list("lease_owner", "lease_expires_at").get(pk=dialog.id)
    epoch = storage.claim_lease(dialog.id, "w2", LEASE_MS, takeover=observed)
    storage.interrupt_started(dialog.id, "w2", epoch)
    committed = storage.interrupted_commit(start.inbox_id)
    assert committed.messages[0]["media"] == expected_media(dialog.id, start.inbox_id)[:1]


def test_a_page_from_memory_shows_the_same_images(alice, answered):
    rows = [storage.message_to_history_row(m) for m in Message.objects.filter(dialog_id=answered["dialog"])]
    session = Session.loaded(
        answered["dialog"],
        title="",
        summary="",
        summary_seq=0,
        rows=rows,
        history_revision=rows[-1]["seq"],
        now=0.0,
    )
    manager = SessionManager(60)
    manager.put(session)
    memory = manager.history_page_from_memory(answered["dialog"])
    assert [m["media"] for m in memory["messages"]] == [
        m["media"] for m in storage.history_page(alice, answered["dialog"])["messages"]
    ]


# --- one image's bytes ------------------------------------------------------------------------------


def test_the_owner_gets_each_images_type_and_decoded_bytes(alice, answered):
    dialog, message = answered["dialog"], answered["start"].inbox_id
    assert storage.message_image(alice, dialog, message, 0) == ("image/png", base64.b64decode(PNG))
    assert storage.message_image(alice, dialog, message, 1) == ("image/gif", base64.b64decode(GIF))


@pytest.mark.parametrize(
    "case",
    [
        "other user",
        "index past the end",
        "index out of range",
        "no images",
        "assistant row",
        "unknown id",
        "not an id",
        "other dialog",
        "deleted dialog",
    ],
)
def test_anything_but_an_owners_user_image_is_not_found(alice, answered, case):
    dialog, message, index, owner = answered["dialog"], answered["start"].inbox_id, 0, alice
    if case == "other user":
        owner = get_or_create_user("bob")[0]
    elif case == "index past the end":
        index = 2
    elif case == "index out of range":
        index = 10_000
    elif case == "no images":
        message = answered["plain"]
    elif case == "assistant row":
        message = answered["start"].reply_message_id
    elif case == "unknown id":
        message = "0" * 8 + "-0000-4000-8000-" + "0" * 12
    elif case == "not an id":
        message = "../../etc"
    elif case == "other dialog":
        dialog = storage.create_dialog(alice, CHANNEL, CHAT).id
    elif case == "deleted dialog":
        Dialog.objects.filter(pk=dialog).update(deleted_at=now_ms())
    with pytest.raises(storage.NotFoundError):
        storage.message_image(owner, dialog, message, index)


def test_a_stored_item_of_a_type_never_accepted_is_not_served(alice, answered):
    message = answered["start"].inbox_id
    html = base64.b64encode(b"<script>alert(1)</script>").decode()
    Message.objects.filter(pk=message).update(
        media_refs=[{"mime_type": "text/html", "data": html}, {"mime_type": "image/png", "data": html}]
    )
    for index in (0, 1):
        with pytest.raises(storage.NotFoundError):
            storage.message_image(alice, answered["dialog"], message, index)
