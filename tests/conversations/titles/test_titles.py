"""Generated dialog titles (seed 004 §5.4, seed 000 §12, DESIGN §6): cleaning, conditions, races."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.models import Dialog, Message, now_ms
from conversations.runtime import notify
from conversations.runtime.supervisor import TaskSupervisor
from conversations.runtime.titles import TitleService
from conversations.titles.rules import MAX_TITLE_CHARS, TITLE_INSTRUCTIONS, build_title_request, clean_title
from providers.base import LLMProvider
from providers.chunks import ProviderChunk
from providers.errors import ServerError
from providers.testing import ScriptedProvider, script_text
from providers.types import ProviderRequest
from tests.conversations.conftest import make_token

CHANNEL = "cli_chat"


class TitleRoutingProvider(LLMProvider):
    """Turn requests go to one script, title requests to another (so their order never matters).

    ``title_started`` is set when a title request arrives; with a ``gate`` the title answer waits
    until the test sets it.
    """

    name = "scripted"
    model = "scripted-model"
    offline = False

    def __init__(self, turns: list, titles: list, gate: asyncio.Event | None = None) -> None:
        self.turns = ScriptedProvider(turns)
        self.titles = ScriptedProvider(titles)
        self.gate = gate
        self.title_started = asyncio.Event()

    async def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        target = self.turns
        if request.messages[0].role == "system" and request.messages[0].text == TITLE_INSTRUCTIONS:
            target = self.titles
            self.title_started.set()
            if self.gate is not None:
                await self.gate.wait()
        async for chunk in target.stream(request):
            yield chunk


# --- clean_title (pure) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "title"),
    [
        ("<think>They plan a trip to Kyoto.</think>\n\nAutumn Trip to Kyoto", "Autumn Trip to Kyoto"),
        ("<Thought>short</Thought>Autumn Trip to Kyoto", "Autumn Trip to Kyoto"),
        ("<REASONING>a\nb</REASONING>  Autumn Trip", "Autumn Trip"),
        ("the user wants a title</think>Autumn Trip", "Autumn Trip"),  # implicit start
        ('"Autumn Trip to Kyoto"', "Autumn Trip to Kyoto"),
        ("Title: Autumn Trip to Kyoto", "Autumn Trip to Kyoto"),
        ('**Title:** "Autumn Trip to Kyoto".', "Autumn Trip to Kyoto"),
        ("# Autumn Trip to Kyoto\n\nThis title sums up the conversation.", "Autumn Trip to Kyoto"),
        ("\n\n  Autumn   Trip\tto Kyoto  \n", "Autumn Trip to Kyoto"),
        ("标题：京都秋季旅行计划。", "京都秋季旅行计划"),
        ("「京都秋季旅行计划」", "京都秋季旅行计划"),
        ("How do I fix a flaky test?", "How do I fix a flaky test?"),
        ('"Tabs" vs "Spaces"', '"Tabs" vs "Spaces"'),
        # Only what a user title may hold (export → import keeps it): escapes, controls,
        # private-use and lone surrogates go; ZWJ emoji stay.
        ("\x1b[31mAutumn Trip\x1b[0m", "Autumn Trip"),
        ("\x1b]0;pwned\x07Autumn Trip", "Autumn Trip"),
        ("Autumn\x07 Trip", "Autumn Trip"),
        ("Autumn\ue000Trip", "Autumn Trip"),
        ("Autumn \ud800Trip", "Autumn Trip"),
        ("Family 👨\u200d👩\u200d👧 Trip", "Family 👨\u200d👩\u200d👧 Trip"),
        ("\x1b[1m\x07\x1b[0m", None),
    ],
)
def test_clean_title_keeps_only_the_visible_title(answer, title):
    assert clean_title(answer) == title


@pytest.mark.parametrize(
    "answer",
    [
        "<think>They plan a trip to Kyoto and I should",  # unterminated: the answer was cut off
        "Autumn Trip <think>or maybe",
        "<think>Only reasoning, no title.</think>",
        "<think>a</think>\n  \n",
        "",
        "   \n\t ",
        '""',
        "**",
    ],
)
def test_clean_title_gives_none_when_the_answer_holds_no_title(answer):
    assert clean_title(answer) is None


def test_a_long_title_is_cut_at_a_word_boundary_without_trailing_punctuation():
    answer = "A very long title, " + "about many different things, " * 10
    title = clean_title(answer)
    assert title is not None and len(title) <= MAX_TITLE_CHARS
    assert answer.startswith(title) and answer[len(title)] in " ,"
    assert title[-1].isalnum()


def test_a_long_title_without_spaces_is_cut_at_the_limit():
    title = clean_title("京都" * 100)
    assert title == ("京都" * 100)[:MAX_TITLE_CHARS]


# --- build_title_request (pure) -------------------------------------------------------------------


def row(seq: int, role: str, content: str, **extra) -> dict:
    return {"seq": seq, "role": role, "content": content, "reasoning": None, "tool_calls": [], **extra}


def test_the_title_request_holds_visible_text_only_never_reasoning_or_tool_payloads():
    rows = [
        row(1, "user", "What time is it in Tokyo?"),
        row(
            2,
            "assistant",
            "",
            reasoning="SECRET-REASONING",
            tool_calls=[{"id": "c1", "name": "clock", "arguments": {"tz": "SECRET-ARGS"}}],
        ),
        row(3, "tool", "SECRET-TOOL-RESULT", tool_call_id="c1", tool_name="clock"),
        row(4, "assistant", "<think>SECRET-THINK</think>It is 10:42 in Tokyo.", reasoning="SECRET-REASONING"),
    ]
    request = build_title_request(rows)
    system, user = request.messages
    assert system.role == "system" and system.text == TITLE_INSTRUCTIONS
    assert "3 to 8 words" in system.text and "5 to 15 characters" in system.text and "language" in system.text
    assert "User: What time is it in Tokyo?" in user.text
    assert "Assistant: It is 10:42 in Tokyo." in user.text
    assert "SECRET" not in user.text
    assert request.tools == []


def test_the_title_request_is_bounded_in_rows_and_characters():
    rows = [row(i, "user" if i % 2 else "assistant", f"m{i} " + "x" * 3000) for i in range(1, 41)]
    request = build_title_request(rows, max_rows=4, max_chars=2000)
    text = request.messages[1].text
    assert text.count("User: ") + text.count("Assistant: ") <= 4
    assert len(text) < 2000 + 200
    assert "m1 " in text and "…" in text


def test_a_dialog_without_visible_text_gets_no_title_request():
    with pytest.raises(ValueError):
        build_title_request([row(1, "assistant", "<think>only this</think>")])


# --- storage conditions ---------------------------------------------------------------------------


def seed_dialog(username: str = "alice", user_messages: int = 2, **fields) -> Dialog:
    """A dialog with ``user_messages`` user/assistant pairs (and one tool row after the first)."""
    owner = get_or_create_user(username)[0]
    dialog = storage.active_dialog(owner, CHANNEL, f"chat-{username}")
    seq = 0
    for i in range(1, user_messages + 1):
        seq += 1
        Message.objects.create(dialog=dialog, seq=seq, role="user", content=f"question {i}")
        if i == 1:
            seq += 1
            Message.objects.create(
                dialog=dialog,
                seq=seq,
                role="assistant",
                content="",
                reasoning_content="thinking",
                tool_calls=[{"id": "c1", "name": "clock", "arguments": {}}],
            )
            seq += 1
            Message.objects.create(dialog=dialog, seq=seq, role="tool", content="10:42", tool_call_id="c1")
        seq += 1
        Message.objects.create(dialog=dialog, seq=seq, role="assistant", content=f"answer {i}")
    Dialog.objects.filter(pk=dialog.pk).update(
        message_count=user_messages, history_revision=seq, total_message_count=seq, **fields
    )
    return Dialog.objects.get(pk=dialog.pk)


def add_user_messages(dialog: Dialog, count: int) -> None:
    fresh = Dialog.objects.get(pk=dialog.pk)
    Dialog.objects.filter(pk=dialog.pk).update(message_count=fresh.message_count + count)


@pytest.mark.django_db
def test_a_title_attempt_is_claimed_once_per_due_count():
    dialog = seed_dialog(user_messages=2)
    assert storage.title_candidate(dialog.id, 3, False) is None  # not due yet

    candidate = storage.title_candidate(dialog.id, 2, False)
    assert candidate is not None
    assert {k: candidate[k] for k in ("dialog_id", "channel", "chat_id", "message_count")} == {
        "dialog_id": dialog.id,
        "channel": CHANNEL,
        "chat_id": "chat-alice",
        "message_count": 2,
    }
    assert [r["role"] for r in candidate["rows"]] == ["user", "assistant", "assistant", "user", "assistant"]
    assert all("provider_state" not in r for r in candidate["rows"])
    assert Dialog.objects.get(pk=dialog.pk).title_attempted_at == 2

    assert storage.title_candidate(dialog.id, 2, False) is None  # the same count is never tried twice
    add_user_messages(dialog, 1)
    assert storage.title_candidate(dialog.id, 2, False) is None  # 3 < 2 + 2
    add_user_messages(dialog, 1)
    assert storage.title_candidate(dialog.id, 2, False)["message_count"] == 4  # retried after N more


@pytest.mark.django_db
def test_on_first_message_attempts_once_and_zero_after_n_never():
    dialog = seed_dialog(user_messages=1)
    assert storage.title_candidate(dialog.id, 0, False) is None
    assert storage.title_candidate(dialog.id, 0, True)["message_count"] == 1
    assert storage.title_candidate(dialog.id, 0, True) is None
    add_user_messages(dialog, 5)
    assert storage.title_candidate(dialog.id, 0, True) is None


@pytest.mark.django_db
def test_no_title_attempt_after_a_user_rename_or_for_a_deleted_dialog():
    renamed = seed_dialog("alice", 2)
    Dialog.objects.filter(pk=renamed.pk).update(title="Mine", title_is_default=False)
    deleted = seed_dialog("bob", 2, deleted_at=now_ms())
    assert storage.title_candidate(renamed.id, 2, True) is None
    assert storage.title_candidate(deleted.id, 2, True) is None
    assert storage.title_candidate("cli_chat:nobody:0000", 2, True) is None
    assert Dialog.objects.get(pk=renamed.pk).title_attempted_at == 0


@pytest.mark.django_db
def test_a_generated_title_commits_only_over_the_default():
    dialog = seed_dialog()
    committed = storage.commit_generated_title(dialog.id, "Autumn Trip")
    assert (committed.title, committed.title_is_default) == ("Autumn Trip", False)
    assert storage.commit_generated_title(dialog.id, "Another") is None  # never generated over again

    renamed = seed_dialog("bob")
    Dialog.objects.filter(pk=renamed.pk).update(title="Mine", title_is_default=False)
    assert storage.commit_generated_title(renamed.id, "Generated") is None
    deleted = seed_dialog("carol", deleted_at=now_ms())
    assert storage.commit_generated_title(deleted.id, "Generated") is None
    assert Dialog.objects.get(pk=renamed.pk).title == "Mine"


# --- the service: the rename race -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_user_rename_while_the_title_is_generated_wins_and_the_late_title_is_discarded(
    monkeypatch, caplog
):
    dialog = await database_sync_to_async(seed_dialog)("alice", 2)
    gate = asyncio.Event()
    provider = TitleRoutingProvider(turns=[], titles=[script_text("Autumn Trip to Kyoto")], gate=gate)
    published: list[dict] = []

    async def record(channel: str, chat_id: str, frame: dict, **_: object) -> None:
        published.append(frame)

    monkeypatch.setattr(notify, "publish_frame", record)
    supervisor = TaskSupervisor("test")
    service = TitleService(provider, supervisor, after_n=2, on_first=False, timeout=5)

    service.schedule(dialog.id)
    await provider.title_started.wait()  # the model is writing the title now
    await database_sync_to_async(
        lambda: Dialog.objects.filter(pk=dialog.pk).update(title="My own title", title_is_default=False)
    )()
    with caplog.at_level(logging.INFO, logger="conversations.runtime.titles"):
        gate.set()
        assert await supervisor.drain(timeout=5)

    final = await database_sync_to_async(Dialog.objects.get)(pk=dialog.pk)
    assert (final.title, final.title_is_default) == ("My own title", False)
    assert len(provider.titles.requests) == 1
    assert published == [], "a discarded title announces nothing"
    assert "discarded" in caplog.text
    await supervisor.close(timeout=1)


@pytest.mark.django_db(transaction=True)
async def test_the_offline_replay_provider_never_names_dialogs():
    provider = TitleRoutingProvider(turns=[], titles=[])
    provider.offline = True
    service = TitleService(provider, TaskSupervisor("test"), after_n=1, on_first=True, timeout=5)
    service.schedule("cli_chat:chat-alice:0000")
    assert not service.enabled and len(service.supervisor) == 0


# --- end to end over the WebSocket ----------------------------------------------------------------


async def send_and_commit(client, content: str, msg_id: str) -> dict:
    await client.send({"type": "message", "content": content, "client_msg_id": msg_id})
    return await client.until("turn_committed", lambda f: f["messages"][0]["content"] == content)


@pytest.mark.django_db(transaction=True)
async def test_after_the_nth_user_message_the_chat_receives_the_generated_title(
    connect, start_worker, settings
):
    settings.PICOBOT = settings.PICOBOT.replace(auto_title_after=2)
    provider = TitleRoutingProvider(
        turns=[
            script_text("Kyoto is lovely in autumn.", reasoning="SECRET-REASONING one"),
            script_text("Book the ryokan early.", reasoning="SECRET-REASONING two"),
        ],
        titles=[
            script_text("<think>They plan a trip.</think>Autumn Trip to Kyoto", reasoning="title thoughts")
        ],
    )
    await start_worker(provider)
    client = await connect(await make_token())
    ready = await client.until("ready")

    await send_and_commit(client, "When should I visit Kyoto?", "t-1")
    assert provider.titles.requests == [], "no title after the first message (N = 2)"
    await send_and_commit(client, "Where should I stay?", "t-2")

    changed = await client.until("session_changed")
    assert changed == {
        "type": "session_changed",
        "session_id": ready["active_session_id"],
        "dialog_id": ready["active_session_id"].rsplit(":", 1)[-1],
        "title": "Autumn Trip to Kyoto",
        "active": True,
    }
    await client.send({"type": "sessions"})
    items = (await client.until("sessions"))["items"]
    assert [(i["session_id"], i["title"]) for i in items] == [
        (ready["active_session_id"], "Autumn Trip to Kyoto")
    ]

    [request] = provider.titles.requests
    prompt = request.messages[1].text
    assert "When should I visit Kyoto?" in prompt and "Book the ryokan early." in prompt
    assert "SECRET" not in prompt
    dialog = await database_sync_to_async(Dialog.objects.get)(pk=ready["active_session_id"])
    assert (dialog.title_is_default, dialog.title_attempted_at) == (False, 2)


@pytest.mark.django_db(transaction=True)
async def test_a_provider_error_while_titling_is_a_warning_and_the_dialog_keeps_working(
    connect, start_worker, settings, caplog
):
    settings.PICOBOT = settings.PICOBOT.replace(auto_title_after=2)
    provider = TitleRoutingProvider(
        turns=[script_text("One."), script_text("Two."), script_text("Three.")],
        titles=[ServerError("upstream exploded", http_status=500)],
    )
    worker = await start_worker(provider)
    client = await connect(await make_token())
    ready = await client.until("ready")

    with caplog.at_level(logging.WARNING, logger="conversations.runtime.titles"):
        await send_and_commit(client, "first", "e-1")
        await send_and_commit(client, "second", "e-2")  # the title attempt starts after this commit
        third = await send_and_commit(client, "third", "e-3")
        assert await worker.supervisor.drain(timeout=5)

    assert third["messages"][-1]["content"] == "Three."
    assert len(provider.titles.requests) == 1
    assert "provider error server_error" in caplog.text and "upstream exploded" not in caplog.text
    assert not [f for f in client.frames if f["type"] in ("error", "session_changed")]
    assert not [f for f in client.of_type("notification") if f.get("level") != "info"]
    dialog = await database_sync_to_async(Dialog.objects.get)(pk=ready["active_session_id"])
    assert (dialog.title, dialog.title_is_default) == (storage.DEFAULT_TITLE, True)


@pytest.mark.django_db(transaction=True)
async def test_stopping_the_worker_cancels_a_title_in_flight(connect, start_worker, settings):
    settings.PICOBOT = settings.PICOBOT.replace(auto_title_after=1)
    provider = TitleRoutingProvider(
        turns=[script_text("Hello.")], titles=[script_text("Never Used")], gate=asyncio.Event()
    )
    worker = await start_worker(provider)
    client = await connect(await make_token())
    ready = await client.until("ready")
    await send_and_commit(client, "hi", "s-1")
    await provider.title_started.wait()

    await worker.stop(timeout=5)
    assert worker.supervisor.closing and len(worker.supervisor) == 0
    dialog = await database_sync_to_async(Dialog.objects.get)(pk=ready["active_session_id"])
    assert dialog.title_is_default
