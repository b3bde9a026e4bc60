"""``/model`` per dialog from the WebUI (WebSocket), REST and Feishu: the next turn's request goes
to the chosen preset's server, ``/info`` names it (issue 17, Must show 1).

Two local OpenAI-compatible servers are the presets ``A`` (the default) and ``B`` of a real
``PICOBOT_CONFIG`` file, so the whole path runs: the file, the catalog, each preset's provider,
the dialog's choice, the turn start, the request, the commit.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from conversations.models import Dialog, InboxMessage
from providers.testing import LocalSSEServer, SSEResponse, openai_events, sse_body
from tests.conversations.api.conftest import ApiClient, user_with_token
from tests.conversations.conftest import make_token
from tests.conversations.feishu.conftest import CHAT
from tests.conversations.feishu.test_end_to_end import ask, delivered
from tests.conversations.presets.conftest import preset_table

pytestmark = [pytest.mark.django_db(transaction=True)]


def answers(text: str) -> SSEResponse:
    return SSEResponse(pieces=[sse_body(openai_events(text))])


def sent_text(server: LocalSSEServer) -> list[str]:
    """The last user message of each request the server received (without the runtime context
    appended to it)."""
    return [
        request["messages"][-1]["content"].split("\n\n[Runtime context")[0] for request in server.requests
    ]


@pytest.fixture
async def two_servers(presets):
    async with (
        LocalSSEServer([answers("from A")], repeat_last=True) as a,
        LocalSSEServer([answers("from B")], repeat_last=True) as b,
    ):
        presets('default_model = "A"\n' + preset_table("A", a.base_url) + preset_table("B", b.base_url))
        yield a, b


@database_sync_to_async
def inbox_models(session_id: str) -> list[str]:
    return list(
        InboxMessage.objects.filter(dialog_id=session_id).order_by("position").values_list("model", flat=True)
    )


async def test_model_from_the_webui_sends_the_next_turn_to_the_chosen_presets_server(
    two_servers, connect, start_worker
):
    a, b = two_servers
    await start_worker(None)  # every preset's provider from the file
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "first", "client_msg_id": "m1"})
    await client.until("turn_committed")

    await client.send({"type": "message", "content": "/model"})
    listing = (await client.until("notification"))["content"]
    assert "→ A (openai model-A)" in listing and "[default]" in listing and "  B (openai model-B)" in listing

    await client.send({"type": "message", "content": "/model B"})
    switched = await client.until("notification")
    assert "B (openai model-B)" in switched["content"] and "next message" in switched["content"]

    await client.send({"type": "message", "content": "second", "client_msg_id": "m2"})
    committed = await client.until("turn_committed")
    assert sent_text(a) == ["first"] and sent_text(b) == ["second"]
    assert [m["content"] for m in committed["messages"] if m["role"] == "assistant"] == ["from B"]

    await client.send({"type": "message", "content": "/info"})
    info = await client.until("notification")
    assert info["info"]["model"] == "B" and "model: B (openai model-B)" in info["content"]
    assert await inbox_models(info["info"]["session_id"]) == ["A", "B"]


async def test_model_errors_are_answered_and_change_nothing(two_servers, connect, start_worker, monkeypatch):
    await start_worker(None)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "/model Nope"})
    error = await client.until("error")
    assert error["code"] == "invalid_command"
    assert (
        "no model preset 'Nope'; there are: A, B" in error["message"] and "/model [name]" in error["message"]
    )
    await client.send({"type": "message", "content": "/model A B"})
    assert "name one model preset" in (await client.until("error"))["message"]
    await client.send({"type": "message", "content": "/info"})
    assert (await client.until("notification"))["info"]["model"] == "A"


async def test_a_preset_whose_key_is_missing_is_refused(presets, connect, start_worker, monkeypatch):
    monkeypatch.delenv("PRESET_TEST_KEY", raising=False)
    presets(
        preset_table("A", "http://127.0.0.1:9/v1")
        + preset_table("paid", "http://127.0.0.1:9/v1", api_key_env="PRESET_TEST_KEY")
    )
    await start_worker(None)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "/model paid"})
    error = await client.until("error")
    assert "'paid' is not available" in error["message"] and "doctor" in error["message"]
    assert "PRESET_TEST_KEY" not in error["message"]  # users are not shown the server's variables
    await client.send({"type": "message", "content": "/model"})
    assert "paid (openai model-paid)" in (listing := (await client.until("notification"))["content"])
    assert "[no key]" in listing


async def test_a_running_turn_keeps_its_preset_and_the_next_one_uses_the_new_choice(
    presets, connect, start_worker
):
    release, arrived = asyncio.Event(), asyncio.Event()

    async def slow_a(request):
        arrived.set()
        await release.wait()
        return answers("slow from A")

    async with (
        LocalSSEServer(handler=slow_a) as a,
        LocalSSEServer([answers("from B")], repeat_last=True) as b,
    ):
        presets(preset_table("A", a.base_url) + preset_table("B", b.base_url))
        await start_worker(None)
        client = await connect(await make_token())
        await client.until("ready")
        await client.send({"type": "message", "content": "first", "client_msg_id": "m1"})
        await client.until("turn_updated")
        await asyncio.wait_for(arrived.wait(), 10)
        await client.send({"type": "message", "content": "/model B"})
        await client.until("notification")
        await client.send({"type": "message", "content": "second", "client_msg_id": "m2"})
        release.set()
        first = await client.until("turn_committed")
        second = await client.until("turn_committed")
    replies = [
        m["content"] for frame in (first, second) for m in frame["messages"] if m["role"] == "assistant"
    ]
    assert replies == ["slow from A", "from B"]
    assert sent_text(a) == ["first"] and sent_text(b) == ["second"]


async def test_patch_model_over_rest_sends_the_next_turn_to_the_chosen_presets_server(
    two_servers, start_worker
):
    a, b = two_servers
    await start_worker(None)
    user, token = await user_with_token("alice")
    api = ApiClient(token)
    sid = (await api.post("/dialogs", json={"title": "REST"})).json()["session_id"]
    assert (await api.get(f"/dialogs/{sid}")).json()["model"] == "A"  # blank: the default's name

    response = await api.patch(f"/dialogs/{sid}", json={"model": "B"})
    assert response.status_code == 200, response.json()
    assert (response.json()["model"], response.json()["model_label"]) == ("B", "B (openai model-B)")
    assert response.json()["title"] == "REST"

    await api.post(f"/dialogs/{sid}/messages", json={"content": "over rest"})
    for _ in range(300):
        if b.requests:
            break
        await asyncio.sleep(0.02)
    assert sent_text(b) == ["over rest"] and not a.requests

    unknown = await api.patch(f"/dialogs/{sid}", json={"model": "Nope"})
    assert unknown.status_code == 422 and unknown.json()["code"] == "invalid_model"
    assert "there are: A, B" in unknown.json()["message"]
    for blank in ("", None):
        back = await api.patch(f"/dialogs/{sid}", json={"model": "B"})
        back = await api.patch(f"/dialogs/{sid}", json={"model": blank})
        assert back.status_code == 200 and back.json()["model"] == "A"
        assert await database_sync_to_async(lambda: Dialog.objects.get(pk=sid).model)() == ""
    both = await api.patch(f"/dialogs/{sid}", json={"title": "Renamed", "model": "B"})
    assert (both.json()["title"], both.json()["model"]) == ("Renamed", "B")


async def test_models_lists_the_presets_without_keys(presets, monkeypatch):
    monkeypatch.setenv("PRESET_TEST_KEY", "sk-secret-never-shown")
    presets(
        'default_model = "B"\n'
        + preset_table("A", "http://127.0.0.1:9/v1", price_input=1.5, context_window=8000)
        + preset_table("B", "http://127.0.0.1:9/v1", api_key_env="PRESET_TEST_KEY", fallbacks=["A"])
    )
    _, token = await user_with_token("alice")
    response = await ApiClient(token).get("/models")
    body = response.json()
    assert response.status_code == 200 and body["default"] == "B"
    assert [item["name"] for item in body["items"]] == ["A", "B"]
    assert body["items"][0]["price_input"] == 1.5 and body["items"][0]["context_window"] == 8000
    assert body["items"][1]["fallbacks"] == ["A"] and body["items"][1]["available"] is True
    assert "sk-secret" not in response.content.decode() and "api_key" not in response.content.decode()
    assert (await ApiClient(None).get("/models")).status_code == 401


async def test_model_from_feishu_sends_the_next_turn_to_the_chosen_presets_server(
    two_servers, feishu, feishu_server, start_worker
):
    a, b = two_servers
    await start_worker(None)
    await delivered(await ask(feishu, feishu_server, "first"))
    command = await ask(feishu, feishu_server, "/model B")
    for _ in range(200):
        if any(m.reply_to == command for m in feishu_server.api.bot_messages(CHAT)):
            break
        await asyncio.sleep(0.05)
    (answer,) = [m for m in feishu_server.api.bot_messages(CHAT) if m.reply_to == command]
    assert "B (openai model-B)" in answer.text
    await delivered(await ask(feishu, feishu_server, "second"))
    assert sent_text(a) == ["first"] and sent_text(b) == ["second"]
    info = await ask(feishu, feishu_server, "/info")
    for _ in range(200):
        if any(m.reply_to == info for m in feishu_server.api.bot_messages(CHAT)):
            break
        await asyncio.sleep(0.05)
    (shown,) = [m for m in feishu_server.api.bot_messages(CHAT) if m.reply_to == info]
    assert "model: B (openai model-B)" in shown.text
