"""TurnInputBuilder and context-overflow recovery (seed 000 §7.1, §7.2, §8, §15).

The builder is the one assembly path of a turn's request: the system prompt once, the runtime
context (time, channel, title, active plan, recalled memory) once inside the last user message,
plan and memory fetched concurrently, a compression update committed only while the dialog's
``state_version`` still matches. Over the budget it shortens tool results before it leaves whole
turns out, and its left-out notice does not suggest ``/compact`` right after a compaction. After
a context overflow the input is rebuilt once through the same path with a smaller window; the
retried request still has the system prompt and the runtime context exactly once (checked on
what a real HTTP upstream received), and a second overflow fails the turn with a clear message.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from channels.db import database_sync_to_async
from django.conf import settings as django_settings
from django.db.models import F

from conversations import storage
from conversations.agent.loop import AgentResult, TurnMessage
from conversations.auth import get_or_create_user
from conversations.context import auto_compaction, runtime_context
from conversations.context.compaction import SUMMARY_INSTRUCTIONS
from conversations.context.compaction_service import RowsSummary
from conversations.context.overflow import overflowed_before_output, run_with_overflow_recovery
from conversations.context.tokens import estimate_request
from conversations.context.turn_input import (
    TOO_LONG,
    ContextPreparationError,
    PreparedInput,
    TurnInputBuilder,
)
from conversations.models import Dialog, InboxMessage, Message, Plan
from conversations.storage import TurnStart
from providers.blocks import ToolResultBlock
from providers.chunks import TextDelta
from providers.errors import ContextOverflowError, OverloadedError
from providers.messages import RUNTIME_CONTEXT_MARKER
from providers.messages import Message as ProviderMessage
from providers.openai_compat import OpenAICompatProvider
from providers.testing import LocalSSEServer, RecordedRequest, ScriptedProvider, SSEResponse, script_text
from tests.conversations.conftest import make_token
from tests.conversations.context.dialog_rows import reload, seed, start_of, turn_start
from tests.conversations.streams import text_pieces

pytestmark = [pytest.mark.django_db(transaction=True)]

NOW = datetime(2025, 5, 4, 10, 42, 0, tzinfo=UTC)
SUMMARY = "SUMMARY: the user asked about 40 long topics."


# --- helpers ----------------------------------------------------------------------------------------


@database_sync_to_async
def bump_state_version(dialog_id: str) -> None:
    Dialog.objects.filter(pk=dialog_id).update(state_version=F("state_version") + 1)


def builder(provider, **options) -> TurnInputBuilder:
    options.setdefault("system_prompt", "You are PicoBot.")
    return TurnInputBuilder(provider, clock=lambda: NOW, **options)


def markers(messages: list[ProviderMessage]) -> int:
    return sum(m.text.count(RUNTIME_CONTEXT_MARKER) for m in messages)


def assert_once(messages: list[ProviderMessage], system_prompt: str) -> None:
    """The system prompt once (first), the runtime context once (in the last user message)."""
    assert [m.role for m in messages].count("system") == 1 and messages[0].role == "system"
    assert messages[0].text.count(system_prompt) == 1
    assert markers(messages) == 1
    assert messages[-1].role == "user" and RUNTIME_CONTEXT_MARKER in messages[-1].text


# --- assembly -----------------------------------------------------------------------------------


async def test_one_system_prompt_and_one_runtime_context_with_the_plan_and_recalled_memory():
    dialog = await seed(2, summary="Earlier: tea.", summary_seq=0)
    await database_sync_to_async(Plan.objects.create)(
        dialog=dialog,
        content={
            "steps": [
                {"text": "Book the hotel", "status": "done"},
                {"text": "Buy tickets", "status": "in_progress"},
            ],
            "note": "Trip in May",
        },
    )

    async def memory(start: TurnStart) -> str:
        return "The user is vegetarian."

    prepared = await builder(ScriptedProvider([]), memory_recall=memory).prepare(await start_of(dialog.id))

    messages = prepared.messages
    assert_once(messages, "You are PicoBot.")
    assert messages[0].text == "You are PicoBot.\n\nSummary of the earlier conversation:\nEarlier: tea."
    assert messages[-1].text == (
        "What now?" + RUNTIME_CONTEXT_MARKER + "time=2025-05-04T10:42:00+00:00; channel=cli_chat; "
        "dialog_title='New chat'\nActive plan:\n[x] Book the hotel\n[>] Buy tickets\nNote: Trip in May\n"
        "Recalled memory:\nThe user is vegetarian.]"
    )
    assert [m.role for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert prepared.base_state_version == (await reload(dialog.id)).state_version
    assert prepared.compression is None and prepared.notices == ()
    assert prepared.estimate == estimate_request(messages)


async def test_without_plan_or_memory_the_runtime_context_is_time_channel_and_title():
    dialog = await seed(1)
    prepared = await builder(ScriptedProvider([])).prepare(await start_of(dialog.id))
    assert prepared.messages[-1].text == (
        "What now?"
        + RUNTIME_CONTEXT_MARKER
        + "time=2025-05-04T10:42:00+00:00; channel=cli_chat; dialog_title='New chat']"
    )


async def test_plan_and_memory_are_fetched_concurrently(monkeypatch):
    dialog = await seed(1)
    recall_started = threading.Event()
    loaded = runtime_context.load_dialog_context

    def slow_plan_read(dialog_id: str) -> dict:
        # Runs on a storage thread: it only returns early if the recall started meanwhile.
        assert recall_started.wait(5), "memory recall did not start while the plan was being read"
        return loaded(dialog_id)

    async def memory(start: TurnStart) -> str:
        recall_started.set()
        return "remembered"

    monkeypatch.setattr(runtime_context, "load_dialog_context", slow_plan_read)
    prepared = await builder(ScriptedProvider([]), memory_recall=memory).prepare(await start_of(dialog.id))
    assert "Recalled memory:\nremembered]" in prepared.messages[-1].text


async def test_a_failing_memory_hook_leaves_memory_out_and_the_turn_goes_on():
    dialog = await seed(1)

    async def memory(start: TurnStart) -> str:
        raise RuntimeError("memory store down")

    prepared = await builder(ScriptedProvider([]), memory_recall=memory).prepare(await start_of(dialog.id))
    assert "Recalled memory" not in prepared.messages[-1].text and markers(prepared.messages) == 1


# --- compression update, committed conditionally ----------------------------------------------------


async def test_the_compression_update_is_committed_only_while_the_state_version_matches():
    dialog = await seed(30, chars=400)  # ≈ 7,000 estimated tokens; the window below is 4,000
    provider = ScriptedProvider([script_text(SUMMARY), script_text(SUMMARY)])
    build = builder(provider, window_tokens=4000, keep_messages=4)
    start = await start_of(dialog.id)

    stale = await build.prepare(start)
    assert stale.compression is not None and stale.compression.summary == SUMMARY
    assert stale.estimate <= 4000 * 0.8
    assert_once(stale.messages, "You are PicoBot.")
    await bump_state_version(dialog.id)  # e.g. a rename or a generated title meanwhile
    assert await build.commit_compression(start, stale) is stale  # the dialog changed: discarded
    assert ((await reload(dialog.id)).summary_seq, (await reload(dialog.id)).summary) == (0, "")

    fresh = await build.prepare(start)
    committed = await build.commit_compression(start, fresh)
    after = await reload(dialog.id)
    assert (
        committed.committed
        and committed.base_state_version == fresh.base_state_version + 1 == after.state_version
    )
    assert (after.summary, after.summary_seq) == (SUMMARY, fresh.compression.covers_seq)
    assert await database_sync_to_async(Message.objects.filter(dialog_id=dialog.id).count)() == 61


async def test_an_input_that_cannot_fit_fails_with_a_clear_message():
    dialog = await seed(0)
    await database_sync_to_async(Message.objects.filter(dialog_id=dialog.id).update)(content="x" * 40_000)
    with pytest.raises(ContextPreparationError) as caught:
        await builder(ScriptedProvider([]), window_tokens=2000).prepare(await start_of(dialog.id))
    assert caught.value.message.startswith(TOO_LONG) and "/new" in caught.value.message


# --- the budget ladder: tool results are shortened before whole turns are left out ----------------


@database_sync_to_async
def seed_rows(rows: list[dict]) -> TurnStart:
    owner = get_or_create_user("alice")[0]
    dialog = storage.active_dialog(owner, "cli_chat", "chat-alice")
    Message.objects.bulk_create([Message(dialog=dialog, seq=i + 1, **row) for i, row in enumerate(rows)])
    Dialog.objects.filter(pk=dialog.pk).update(history_revision=len(rows))
    return turn_start(dialog.pk)


U_ORDER = [  # the QA's u_order.py dialog: one earlier turn with a 3,000-character tool result
    {"role": "user", "content": "previous question " * 30},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "http_fetch", "arguments": {"url": "http://x"}}],
    },
    {"role": "tool", "content": "R" * 3000, "tool_call_id": "c1", "tool_name": "http_fetch"},
    {"role": "assistant", "content": "previous answer the user relies on"},
    {"role": "user", "content": "current question"},
]


async def test_tool_results_are_shortened_before_whole_turns_are_left_out():
    start = await seed_rows(U_ORDER)
    build = TurnInputBuilder(ScriptedProvider([]), system_prompt="sys", keep_tool_results=4)
    full = await build.prepare(start)
    # A window whose share fits the input once the old result is pruned, but not with it whole.
    shortened = build.estimate(
        [
            m
            if m.role != "tool"
            else ProviderMessage.tool_result(
                "c1", "[older tool result pruned: 3000 chars]", tool_name="http_fetch"
            )
            for m in full.messages
        ]
    )
    assert shortened < 400 < full.estimate
    prepared = await build.prepare(start, window_tokens=int(400 / build.threshold))
    assert prepared.dropped_messages == 0 and prepared.notices == ()
    assert prepared.pruned_results == 1 and prepared.estimate <= 400
    texts = [m.text for m in prepared.messages]
    assert "previous answer the user relies on" in texts and texts[1].startswith("previous question")
    (result,) = [b for m in prepared.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert result.content == "[older tool result pruned: 3000 chars]"


async def test_the_left_out_notice_does_not_suggest_compact_right_after_a_compaction(monkeypatch):
    dialog = await seed(30, chars=400)
    start = await start_of(dialog.id)

    async def summarise_keeping_everything(dialog_id, provider, previous, rows, *, keep, budget, timeout):
        # A compaction that folded only the first exchange: the rest is still over the budget.
        return RowsSummary(summary="Earlier: topic 0.", covers_seq=2, kept_rows=rows[2:], summarised_rows=2)

    monkeypatch.setattr(auto_compaction, "summarise_rows", summarise_keeping_everything)
    build = TurnInputBuilder(ScriptedProvider([]), system_prompt="sys", window_tokens=4000, keep_messages=4)
    prepared = await build.prepare(start)
    assert prepared.compression is not None and prepared.dropped_messages > 0
    [notice] = prepared.notices
    assert "left out of the model's input" in notice and "/compact" not in notice


# --- overflow recovery (unit) -------------------------------------------------------------------


async def test_recovery_rebuilds_through_the_same_path_with_a_smaller_window():
    dialog = await seed(20, chars=800)
    provider = ScriptedProvider([script_text(SUMMARY)])
    build = builder(provider)
    start = await start_of(dialog.id)
    first = await build.prepare(start)  # the default window: nothing to compact
    assert first.compression is None and provider.requests == []

    second = await build.recover_after_overflow(start, first)

    assert second.estimate <= first.estimate // 2 * 0.8
    assert second.compression is not None and provider.requests[0].messages[0].text == SUMMARY_INSTRUCTIONS
    assert_once(second.messages, "You are PicoBot.")
    assert SUMMARY in second.messages[0].text
    assert second.messages[-1].text.startswith("What now?" + RUNTIME_CONTEXT_MARKER)


async def test_recovery_reads_the_dialog_state_again_instead_of_what_the_turn_start_prefetched():
    dialog = await seed(20, chars=800)
    stale = {
        "dialog": {"state_version": 999, "auto_compact_failures": 0, "plan": "[>] an old plan"},
        "memory": None,
    }
    start = replace(await start_of(dialog.id), prefetched=stale)
    build = builder(ScriptedProvider([script_text(SUMMARY)]))
    first = await build.prepare(start)
    assert first.base_state_version == 999, "the first request uses what the start read"

    second = await build.recover_after_overflow(start, first)

    assert second.base_state_version == (await reload(dialog.id)).state_version != 999
    assert "an old plan" not in second.messages[-1].text


def test_only_an_overflow_before_anything_was_shown_is_recovered():
    overflow = ContextOverflowError("too long", http_status=400)
    assert overflowed_before_output(AgentResult(error=overflow))
    shown = TurnMessage(0, ProviderMessage.assistant(text="Half"))
    assert not overflowed_before_output(AgentResult(error=overflow, partial=shown))
    assert not overflowed_before_output(AgentResult(error=overflow, messages=[shown]))
    assert not overflowed_before_output(AgentResult(error=OverloadedError("busy")))
    assert not overflowed_before_output(AgentResult())


async def test_run_with_recovery_retries_once_and_then_fails_clearly():
    dialog = await seed(20, chars=800)
    start = await start_of(dialog.id)
    sent: list[list[ProviderMessage]] = []
    notices: list[str] = []

    async def always_overflows(messages: list[ProviderMessage]) -> AgentResult:
        sent.append(messages)
        return AgentResult(error=ContextOverflowError("prompt is too long", http_status=400))

    async def publish(text: str) -> None:
        notices.append(text)

    build = builder(ScriptedProvider([script_text(SUMMARY)]))
    with pytest.raises(ContextPreparationError) as caught:
        await run_with_overflow_recovery(build, start, always_overflows, publish=publish)
    assert len(sent) == 2  # the first request and one retry, never more
    assert caught.value.message.startswith(TOO_LONG + ": the model refused its input again")
    assert isinstance(build.prepared, PreparedInput) and build.prepared.committed
    for messages in sent:
        assert_once(messages, "You are PicoBot.")


# --- whole turns over real HTTP -------------------------------------------------------------------

OVERFLOW_BYTES = 40_000  # the upstream's "context window", in request body bytes


class WindowedUpstream:
    """An OpenAI-compatible upstream with a context window: a request body over
    ``OVERFLOW_BYTES`` gets OpenAI's HTTP 400 ``context_length_exceeded`` (or every turn request
    does, with ``always``); a summary request gets ``SUMMARY``; others get ``answer``."""

    def __init__(self, answer: str = "Here is the answer.", *, always: bool = False) -> None:
        self.answer = answer
        self.always = always

    @staticmethod
    def is_summary(request: RecordedRequest) -> bool:
        return (request.json() or {}).get("messages", [{}])[0].get("content") == SUMMARY_INSTRUCTIONS

    def __call__(self, request: RecordedRequest) -> SSEResponse:
        if self.is_summary(request):
            return SSEResponse(pieces=text_pieces(SUMMARY))
        if self.always or len(request.body) > OVERFLOW_BYTES:
            body = {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens. However, your "
                    "messages resulted in 9000 tokens.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
            return SSEResponse(
                400, {"content-type": "application/json"}, [json.dumps(body).encode()], chunked=False
            )
        return SSEResponse(pieces=text_pieces(self.answer))


def turn_requests(server: LocalSSEServer) -> list[dict]:
    return [r.json() for r in server.recorded if not WindowedUpstream.is_summary(r)]


@database_sync_to_async
def seed_chat(session_id: str, cycles: int, chars: int) -> None:
    dialog = Dialog.objects.get(pk=session_id)
    rows = []
    for n in range(cycles):
        rows.append(Message(dialog=dialog, seq=2 * n + 1, role="user", content=f"topic {n}: " + "q" * chars))
        rows.append(
            Message(dialog=dialog, seq=2 * n + 2, role="assistant", content=f"about {n}: " + "a" * chars)
        )
    Message.objects.bulk_create(rows)
    Dialog.objects.filter(pk=session_id).update(history_revision=len(rows), total_message_count=len(rows))


@database_sync_to_async
def stored(session_id: str) -> dict:
    dialog = Dialog.objects.get(pk=session_id)
    return {
        "rows": list(
            Message.objects.filter(dialog=dialog, seq__gt=60).order_by("seq").values_list("role", "content")
        ),
        "summary": dialog.summary,
        "summary_seq": dialog.summary_seq,
        "inbox": list(InboxMessage.objects.filter(dialog=dialog).values_list("status", "error")),
    }


def provider_for(server: LocalSSEServer) -> OpenAICompatProvider:
    return OpenAICompatProvider(server.base_url, "sk-test", "test-model", max_retries=0)


async def run_one(client, content: str) -> dict:
    await client.send({"type": "message", "content": content, "client_msg_id": content})
    await client.until("turn_committed", timeout=20)
    return [f for f in client.of_type("turn_updated") if f["turn"]["status"] != "running"][-1]["turn"]


async def test_after_an_overflow_the_retried_request_has_the_system_prompt_and_runtime_context_once(
    connect, start_worker, settings
):
    settings.PICOBOT = settings.PICOBOT.replace(auto_title_after=0)
    system_prompt = django_settings.PICOBOT.system_prompt
    async with LocalSSEServer(handler=WindowedUpstream()) as server:
        client = await connect(await make_token())
        session_id = (await client.until("ready"))["active_session_id"]
        await seed_chat(session_id, 30, 1500)  # ≈ 90 KB of history: over the upstream's window
        await start_worker(provider_for(server))
        turn = await run_one(client, "What did we cover?")

    assert turn["status"] == "completed", turn["error"]
    assert [b["text"] for b in turn["blocks"] if b["type"] == "assistant"] == ["Here is the answer."]
    first, retried = turn_requests(server)
    assert len(server.recorded) == 3  # the overflowing request, one summary call, the retry
    for body in (first, retried):
        roles = [m["role"] for m in body["messages"]]
        assert roles.count("system") == 1 and roles[0] == "system"
        assert body["messages"][0]["content"].count(system_prompt) == 1
        assert json.dumps(body["messages"]).count("[Runtime context: ") == 1
        assert body["messages"][-1]["role"] == "user"
        assert body["messages"][-1]["content"].startswith("What did we cover?\n\n[Runtime context: ")
    assert SUMMARY in retried["messages"][0]["content"] and SUMMARY not in first["messages"][0]["content"]
    assert len(json.dumps(retried).encode()) <= OVERFLOW_BYTES < len(json.dumps(first).encode())
    state = await stored(session_id)
    assert state["rows"] == [("user", "What did we cover?"), ("assistant", "Here is the answer.")]
    assert state["summary"] == SUMMARY and 0 < state["summary_seq"] <= 60


async def test_a_second_overflow_fails_the_turn_clearly_and_stores_no_answer(connect, start_worker, settings):
    settings.PICOBOT = settings.PICOBOT.replace(auto_title_after=0)
    async with LocalSSEServer(handler=WindowedUpstream(always=True)) as server:
        client = await connect(await make_token())
        session_id = (await client.until("ready"))["active_session_id"]
        await seed_chat(session_id, 30, 1500)
        await start_worker(provider_for(server))
        turn = await run_one(client, "Once more?")

    assert turn["status"] == "failed"
    assert turn["error"].startswith(
        "The conversation is too long for the model: the model refused its input again after it was cut down"
    )
    assert "maximum context length" not in turn["error"]  # the provider's text stays in the log
    assert not [b for b in turn["blocks"] if b["type"] == "assistant"]
    assert len(turn_requests(server)) == 2  # one retry, never a loop
    state = await stored(session_id)
    assert state["rows"] == [("user", "Once more?")]
    [(status, error)] = state["inbox"]
    assert status == "done" and error.startswith("The conversation is too long")


async def test_an_overflow_after_text_was_shown_is_not_retried(connect, start_worker):
    chunks = [TextDelta("Half an"), ContextOverflowError("context length exceeded", http_status=400)]
    provider = ScriptedProvider([chunks])
    await start_worker(provider)
    client = await connect(await make_token())
    await client.until("ready")
    turn = await run_one(client, "Hi")
    assert turn["status"] == "failed" and len(provider.requests) == 1
    committed = client.of_type("turn_committed")[-1]
    assert [(m["role"], m["completion_status"]) for m in committed["messages"]] == [
        ("user", "completed"),
        ("assistant", "interrupted"),
    ]


async def test_a_stop_during_automatic_compaction_cancels_the_turn(connect, start_worker, settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_context_window=4000, auto_title_after=0)

    class Hanging(ScriptedProvider):
        entered = asyncio.Event()

        async def _stream(self, request):
            self.requests.append(request)
            self.entered.set()
            await asyncio.Event().wait()
            yield  # pragma: no cover

    provider = Hanging([])
    client = await connect(await make_token())
    ready = await client.until("ready")
    await seed_chat(ready["active_session_id"], 30, 400)
    await start_worker(provider)
    await client.send({"type": "message", "content": "Go", "client_msg_id": "stop-1"})
    await provider.entered.wait()
    await client.until("turn_updated", lambda f: f["turn"]["phase"] == "compacting")
    await client.send({"type": "stop", "session_id": ready["active_session_id"]})
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "cancelled"
    assert provider.requests[0].messages[0].text == SUMMARY_INSTRUCTIONS
    assert (await reload(ready["active_session_id"])).auto_compact_failures == 0  # a stop is no failure
