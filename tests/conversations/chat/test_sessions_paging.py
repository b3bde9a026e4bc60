"""The ``sessions`` frame pages and searches every dialog of the chat (PROTOCOL §1 ``sessions``),
and the sidebar's rename/delete act on the dialog their ``session_id`` names (PROTOCOL "Slash
commands": a command acts on the frame's ``session_id``)."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from conversations.models import Dialog
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]


@database_sync_to_async
def add_dialogs(active_session_id: str, titles: list[str]) -> list[str]:
    """Dialogs of the chat with these titles, the first the most recently active; returns their
    session ids in that order. The chat's active dialog stays the newest of all."""
    from conversations import storage

    first = Dialog.objects.get(pk=active_session_id)
    ids = []
    for title in titles:
        ids.append(storage.create_dialog(first.owner, first.channel, first.chat_id, title).id)
    base = first.last_active_at
    for age, session_id in enumerate(ids, 1):
        Dialog.objects.filter(pk=session_id).update(last_active_at=base - age * 1000)
    storage.switch_dialog(first.owner, first.channel, first.chat_id, first.dialog_id)
    Dialog.objects.filter(pk=active_session_id).update(last_active_at=base + 1000)
    return ids


async def sessions(client, **paging) -> dict:
    await client.send({"type": "sessions", **paging})
    return await client.until("sessions")


async def test_sessions_pages_through_every_dialog_most_recent_first(connect):
    client = await connect(await make_token())
    ready = await client.until("ready")
    older = await add_dialogs(ready["active_session_id"], [f"Dialog {n}" for n in range(25)])
    everything = [ready["active_session_id"], *older]

    first = await sessions(client)
    assert len(first["items"]) == 10 and first["has_more"] is True and first["offset"] == 0
    assert "query" not in first
    seen, offset = [], 0
    while True:
        page = await sessions(client, limit=7, offset=offset)
        assert page["offset"] == offset
        seen += [i["session_id"] for i in page["items"]]
        if not page["has_more"]:
            break
        offset += 7
    assert seen == everything, "every dialog once, most recently active first"
    last = await sessions(client, limit=100, offset=26)
    assert last["items"] == [] and last["has_more"] is False
    assert [i["active"] for i in (await sessions(client, limit=2))["items"]] == [True, False]


async def test_sessions_query_searches_titles_case_insensitively(connect):
    alice, bob = await connect(await make_token("alice")), await connect(await make_token("bob"))
    ready, ready_b = await alice.until("ready"), await bob.until("ready")
    ids = await add_dialogs(ready["active_session_id"], ["Trip to Rome", "Taxes", "trip NOTES", "50%_off"])
    await add_dialogs(ready_b["active_session_id"], ["Bob's trip"])

    found = await sessions(alice, query="  TRIP ")
    assert [i["session_id"] for i in found["items"]] == [ids[0], ids[2]]
    assert found["query"] == "TRIP" and found["has_more"] is False
    paged = await sessions(alice, query="trip", limit=1, offset=1)
    assert [i["session_id"] for i in paged["items"]] == [ids[2]] and paged["offset"] == 1
    # LIKE wildcards in the query match themselves only.
    assert [i["title"] for i in (await sessions(alice, query="%_"))["items"]] == ["50%_off"]
    assert (await sessions(alice, query="nothing like it"))["items"] == []
    assert len((await sessions(alice, query="   "))["items"]) == 5, "a blank query is no filter"


@pytest.mark.parametrize(
    "paging",
    [
        {"limit": 0},
        {"limit": 101},
        {"limit": True},
        {"offset": -1},
        {"offset": "2"},
        {"query": 5},
        {"query": "x" * 201},
    ],
)
async def test_bad_sessions_paging_is_answered_with_an_error_and_the_connection_stays(connect, paging):
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "sessions", **paging})
    assert (await client.until("error"))["code"] == "invalid_frame"
    assert len((await sessions(client))["items"]) == 1


async def test_rename_and_delete_act_on_the_dialog_their_session_id_names(connect):
    client = await connect(await make_token())
    ready = await client.until("ready")
    active = ready["active_session_id"]
    other, kept = await add_dialogs(active, ["Old name", "Kept"])

    await client.send({"type": "message", "content": "/rename  New name ", "session_id": other})
    renamed = await client.until("session_changed")
    assert (renamed["session_id"], renamed["title"], renamed["active"]) == (other, "New name", False)

    await client.send({"type": "message", "content": "/delete", "session_id": other})
    deleted = await client.until("session_changed")
    assert (deleted["session_id"], deleted.get("deleted")) == (other, True)
    assert await client.communicator.receive_nothing(timeout=0.2), "the active dialog did not change"
    listed = [(i["session_id"], i["active"]) for i in (await sessions(client))["items"]]
    assert listed == [(active, True), (kept, False)]


@database_sync_to_async
def add_user_rows(session_id: str, texts: list[str]) -> None:
    from conversations.models import Message

    dialog = Dialog.objects.get(pk=session_id)
    for seq, text in enumerate(texts, 1):
        Message.objects.create(dialog=dialog, seq=seq, role=Message.Role.USER, content=text)
        Message.objects.create(dialog=dialog, seq=seq + 100, role=Message.Role.ASSISTANT, content="an answer")


async def test_sessions_items_preview_the_first_user_message_in_one_query(connect):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from conversations.storage.dialog_reads import sessions_page

    client = await connect(await make_token())
    ready = await client.until("ready")
    empty, long_one, *rest = await add_dialogs(ready["active_session_id"], ["A", "B", "C", "D"])
    await add_user_rows(long_one, ["  Plan   a\ntrip\tto " + "Rome " * 40, "a later message"])
    for n, session_id in enumerate(rest):
        await add_user_rows(session_id, [f"question {n}"])

    items = {i["session_id"]: i for i in (await sessions(client, limit=100))["items"]}
    assert items[empty]["preview"] == "" and items[ready["active_session_id"]]["preview"] == ""
    preview = items[long_one]["preview"]
    assert preview.startswith("Plan a trip to Rome Rome") and preview.endswith("…")
    assert len(preview) <= 100 and "  " not in preview
    assert [items[s]["preview"] for s in rest] == ["question 0", "question 1"]

    @database_sync_to_async
    def count_queries(limit: int) -> int:
        first = Dialog.objects.get(pk=ready["active_session_id"])
        with CaptureQueriesContext(connection) as queries:
            sessions_page(first.owner, first.channel, first.chat_id, limit=limit)
        return len(queries)

    assert await count_queries(100) == await count_queries(1), "no query per dialog"


@database_sync_to_async
def add_image_row(session_id: str, text: str, images: int) -> None:
    from conversations.models import Message

    media = [{"mime_type": "image/png", "data": "iVBORw0KGgo="} for _ in range(images)]
    dialog = Dialog.objects.get(pk=session_id)
    Message.objects.create(dialog=dialog, seq=1, role=Message.Role.USER, content=text, media_refs=media)


async def test_sessions_query_matches_the_title_or_the_first_user_message(connect):
    client = await connect(await make_token())
    ready = await client.until("ready")
    ids = await add_dialogs(ready["active_session_id"], ["New chat", "Rome notes", "New chat", "New chat"])
    await add_user_rows(ids[0], ["Plan a TRIP to Paris", "and then rome"])
    await add_user_rows(ids[2], ["taxes for 2024"])

    found = await sessions(client, query="rome")
    assert [i["session_id"] for i in found["items"]] == [ids[1]], "a later message is not searched"
    found = await sessions(client, query="trip to")
    assert [i["session_id"] for i in found["items"]] == [ids[0]] and found["query"] == "trip to"
    assert found["items"][0]["preview"] == "Plan a TRIP to Paris"
    paged = await sessions(client, query="o", limit=1, offset=1)  # Paris, Rome notes, taxes for
    assert [i["session_id"] for i in paged["items"]] == [ids[1]] and paged["has_more"] is True


async def test_a_first_message_of_images_alone_is_previewed_as_images_in_one_query(connect):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from conversations.storage.dialog_reads import sessions_page

    client = await connect(await make_token())
    ready = await client.until("ready")
    one, three, captioned, blank = await add_dialogs(ready["active_session_id"], ["New chat"] * 4)
    await add_image_row(one, "", 1)
    await add_image_row(three, " \n ", 3)
    await add_image_row(captioned, "What is this?", 2)
    await add_image_row(blank, "", 0)

    items = {i["session_id"]: i["preview"] for i in (await sessions(client, limit=100))["items"]}
    assert [items[s] for s in (one, three, captioned, blank)] == ["Image", "3 images", "What is this?", ""]
    assert [i["session_id"] for i in (await sessions(client, query="image"))["items"]] == [], (
        "the words of the preview are not the message's text"
    )

    @database_sync_to_async
    def count_queries(**kw) -> int:
        first = Dialog.objects.get(pk=ready["active_session_id"])
        with CaptureQueriesContext(connection) as queries:
            sessions_page(first.owner, first.channel, first.chat_id, **kw)
        return len(queries)

    assert await count_queries(limit=100) == await count_queries(limit=1)
    assert await count_queries(limit=100, query="x") == await count_queries(limit=1)
