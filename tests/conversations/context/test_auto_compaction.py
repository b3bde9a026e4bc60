"""Automatic compaction (seed 002 Task 6 §6c–§6d, FIX-F; DESIGN §6).

Pure parts first (``should_compact``, ``microcompact``, ``drop_oldest_turns``,
``fit_summary_request``), then whole turns through the WebSocket consumer, the agent worker and
the executor on dialogs seeded straight into the database: a 500-message dialog with large tool
outputs compacts by itself and its next request fits the window; error tool results survive
microcompact; a summary call that hangs ends at ``COMPACT_TIMEOUT`` with a visible failure and
the dialog goes on; three failures in a row switch automatic compaction off.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from channels.db import database_sync_to_async

from conversations.agent.tool_registry import ToolRegistry
from conversations.context.compaction import (
    MAX_CONSECUTIVE_FAILURES,
    SUMMARY_INSTRUCTIONS,
    fit_summary_request,
    should_compact,
)
from conversations.context.compaction_service import compact_dialog
from conversations.context.pruning import PRUNED_RESULT, drop_oldest_turns, microcompact
from conversations.context.tokens import estimate_messages, estimate_request
from conversations.models import Dialog, Message
from providers.base import LLMProvider
from providers.blocks import ToolResultBlock, ToolUseBlock
from providers.chunks import ProviderChunk
from providers.messages import RUNTIME_CONTEXT_MARKER
from providers.messages import Message as ProviderMessage
from providers.testing import ScriptedProvider, script_text
from providers.types import ProviderRequest
from tests.conversations.conftest import make_token

# --- should_compact ---------------------------------------------------------------------------------


def test_should_compact_past_the_share_of_the_window_until_three_failures():
    assert not should_compact(800, 1000, 0.8)
    assert should_compact(801, 1000, 0.8)
    assert should_compact(801, 1000, 0.8, failures=MAX_CONSECUTIVE_FAILURES - 1)
    assert not should_compact(10_000, 1000, 0.8, failures=MAX_CONSECUTIVE_FAILURES)
    assert MAX_CONSECUTIVE_FAILURES == 3


# --- microcompact (request only) ----------------------------------------------------------------


def tool_turn(n: int, content: str, *, is_error: bool = False) -> list[ProviderMessage]:
    call = ToolUseBlock(f"call_{n}", "fetch", {"n": n})
    return [
        ProviderMessage.user(f"question {n}"),
        ProviderMessage("assistant", [call]),
        ProviderMessage.tool_result(f"call_{n}", content, is_error=is_error, tool_name="fetch"),
        ProviderMessage.assistant(text=f"answer {n}"),
    ]


def results(messages: list[ProviderMessage]) -> list[ToolResultBlock]:
    return [b for m in messages for b in m.content if isinstance(b, ToolResultBlock)]


def test_microcompact_prunes_old_successful_results_and_never_error_results_or_the_newest():
    big = "x" * 5000
    error = "Error: quota exceeded for this key. " * 20
    messages = [ProviderMessage.system("S")]
    for n in range(6):
        messages += tool_turn(n, error if n in (0, 4) else big, is_error=n in (0, 4))
    before = list(messages)

    pruned, freed = microcompact(messages, keep_recent=2)

    contents = [(r.tool_call_id, r.content) for r in results(pruned)]
    marker = PRUNED_RESULT.format(chars=5000)
    assert marker == "[older tool result pruned: 5000 chars]"
    assert contents == [
        ("call_0", error),  # old, but an error: kept whole (seed 002 FIX-F)
        ("call_1", marker),
        ("call_2", marker),
        ("call_3", marker),
        ("call_4", error),  # one of the newest two (and an error)
        ("call_5", big),  # one of the newest two
    ]
    assert all(r.is_error == (r.tool_call_id in ("call_0", "call_4")) for r in results(pruned))
    assert freed == estimate_messages(messages) - estimate_messages(pruned) > 3 * 1000
    assert messages == before  # the input is not changed: this is a request-only view
    assert [m.role for m in pruned] == [m.role for m in messages]  # pairs and order stay


def test_microcompact_leaves_short_results_and_small_inputs_alone():
    messages = [ProviderMessage.system("S"), *tool_turn(1, "12:00"), *tool_turn(2, "13:00")]
    pruned, freed = microcompact(messages, keep_recent=0)
    assert pruned == messages and freed == 0
    assert microcompact(messages, keep_recent=10) == (messages, 0)


# --- drop_oldest_turns (request only) -----------------------------------------------------------


def test_drop_oldest_turns_cuts_before_a_user_message_and_keeps_the_current_one():
    system = ProviderMessage.system("S")
    turns = [tool_turn(n, "r" * 700) for n in range(4)]
    messages = [system, *[m for turn in turns for m in turn]]

    kept, dropped = drop_oldest_turns(messages, estimate_messages([system, *turns[2], *turns[3]]))
    assert (kept, dropped) == ([system, *turns[2], *turns[3]], 8)

    kept, dropped = drop_oldest_turns(messages, 1)  # nothing fits: the last turn always stays
    assert (kept, dropped) == ([system, *turns[3]], 12)

    assert drop_oldest_turns(messages, 10**6) == (messages, 0)


# --- fit_summary_request ------------------------------------------------------------------------


def history_rows(cycles: int, tool_chars: int) -> list[dict]:
    rows: list[dict] = []
    for n in range(cycles):
        call_id = f"call_{n}"
        rows += [
            {"role": "user", "content": f"Fetch page {n}, please."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": call_id, "name": "fetch", "arguments": {"n": n}}],
            },
            {
                "role": "tool",
                "content": f"page {n}: " + "p" * tool_chars,
                "tool_call_id": call_id,
                "tool_name": "fetch",
            },
            {"role": "assistant", "content": f"Page {n} is about topic {n}."},
        ]
    return [{**row, "seq": seq} for seq, row in enumerate(rows, start=1)]


def test_a_summary_request_is_made_to_fit_its_budget():
    rows = history_rows(10, 300)
    request, omitted = fit_summary_request("", rows, 100_000)
    assert omitted == 0 and "p" * 300 in request.messages[1].text  # small enough: nothing cut

    rows = history_rows(200, 4000)
    request, omitted = fit_summary_request("Earlier: the user reads pages.", rows, 6000)
    text = request.messages[1].text
    assert estimate_request(request.messages) <= 6000
    assert omitted > 0 and f"({omitted} earlier message(s) left out" in text
    assert "Previous summary:\nEarlier: the user reads pages." in text
    assert "Page 199 is about topic 199." in text  # the newest rows are the ones kept


# --- whole turns --------------------------------------------------------------------------------

pytestmark_db = pytest.mark.django_db(transaction=True)
WINDOW = 8000
SUMMARY = "SUMMARY: the user had pages 0-122 fetched; each was about its own topic."


class SummaryGate(LLMProvider):
    """A scripted model whose summary calls wait for ``gate`` (forever when it never opens).

    Turn requests are answered from ``answers`` in order; summary requests (system prompt =
    ``SUMMARY_INSTRUCTIONS``) from ``summaries``. ``entered`` is set when a summary call began.
    """

    name = "gated"
    model = "gated-model"
    offline = False

    def __init__(self, answers: list, summaries: list | None = None, *, hang: bool = False) -> None:
        self.turns = ScriptedProvider(answers)
        self.summaries = ScriptedProvider(summaries or [])
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.hang = hang
        self.requests: list[ProviderRequest] = []

    @staticmethod
    def is_summary(request: ProviderRequest) -> bool:
        return request.messages[0].text == SUMMARY_INSTRUCTIONS

    def summary_requests(self) -> list[ProviderRequest]:
        return [r for r in self.requests if self.is_summary(r)]

    def turn_requests(self) -> list[ProviderRequest]:
        return [r for r in self.requests if not self.is_summary(r)]

    async def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        self.requests.append(request)
        if self.is_summary(request):
            self.entered.set()
            if self.hang:
                await asyncio.Event().wait()  # never answers: only COMPACT_TIMEOUT ends it
            await self.gate.wait()
            source = self.summaries
        else:
            source = self.turns
        async for chunk in source.stream(request):
            yield chunk


@database_sync_to_async
def seed_tool_history(
    session_id: str, cycles: int, *, tool_chars: int, error_every: int = 0, **fields
) -> None:
    """``cycles`` × (user, assistant tool call, tool result of ``tool_chars``, assistant answer).

    With ``error_every``, every such cycle's result is an error (``is_error``) with a
    recognisable text instead.
    """
    dialog = Dialog.objects.get(pk=session_id)
    rows = []
    for n, row in enumerate(history_rows(cycles, tool_chars)):
        cycle = n // 4
        if row["role"] == "tool" and error_every and cycle % error_every == 0:
            row = {
                **row,
                "content": f"ERROR-{cycle}: the upstream refused this page (quota exceeded). " * 4,
                "is_error": True,
            }
        rows.append(Message(dialog=dialog, **row))
    Message.objects.bulk_create(rows)
    Dialog.objects.filter(pk=session_id).update(
        history_revision=len(rows), total_message_count=len(rows), message_count=cycles, **fields
    )


@database_sync_to_async
def dialog_state(session_id: str) -> dict:
    dialog = Dialog.objects.get(pk=session_id)
    return {
        "summary": dialog.summary,
        "summary_seq": dialog.summary_seq,
        "failures": dialog.auto_compact_failures,
        "rows": Message.objects.filter(dialog_id=session_id).count(),
        "tool_contents": list(
            Message.objects.filter(dialog_id=session_id, role="tool")
            .order_by("seq")
            .values_list("content", flat=True)
        ),
    }


def small_window(settings, window: int = WINDOW, **extra) -> None:
    settings.PICOBOT = settings.PICOBOT.replace(
        llm_context_window=window, compact_threshold=0.8, auto_title_after=0, **extra
    )


async def send(client, content: str) -> dict:
    """Send a message; return its terminal snapshot (after ``turn_committed``)."""
    await client.send({"type": "message", "content": content, "client_msg_id": content})
    await client.until("turn_committed", lambda f: f["messages"][0]["content"] == content, timeout=20)
    return [f for f in client.of_type("turn_updated") if f["turn"]["status"] != "running"][-1]["turn"]


def phases_of(client, turn_id: str) -> list[str]:
    return [f["turn"]["phase"] for f in client.of_type("turn_updated") if f["turn"]["id"] == turn_id]


def runtime_markers(request: ProviderRequest) -> int:
    return sum(m.text.count(RUNTIME_CONTEXT_MARKER) for m in request.messages)


@pytestmark_db
async def test_a_500_message_dialog_with_large_tool_outputs_compacts_and_its_next_request_fits(
    connect, start_worker, settings
):
    small_window(settings)
    provider = SummaryGate(
        [script_text("Page 124 is next."), script_text("Still here.")], [script_text(SUMMARY)]
    )
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await seed_tool_history(session_id, 125, tool_chars=4000)  # 500 rows, ≈ 150,000 estimated tokens
    worker = await start_worker(provider, tools=ToolRegistry())

    await client.send({"type": "message", "content": "And page 124?", "client_msg_id": "m-1"})
    await provider.entered.wait()  # the summary call is running: the turn shows it
    await client.until("turn_updated", lambda f: f["turn"]["phase"] == "compacting")
    provider.gate.set()
    await client.until("turn_committed")
    turn = [f for f in client.of_type("turn_updated") if f["turn"]["status"] != "running"][-1]["turn"]
    assert turn["status"] == "completed", turn["error"]
    assert turn["phase"] == "finalizing"

    [summary_request] = provider.summary_requests()
    assert estimate_request(summary_request.messages) <= WINDOW * 0.8  # the summary call fits too
    [request] = provider.turn_requests()
    tools = worker.tools.definitions()
    assert estimate_request(request.messages, tools) <= WINDOW * 0.8 < WINDOW
    system, *rest = request.messages
    assert system.role == "system" and SUMMARY in system.text
    assert [m.role for m in rest].count("system") == 0 and runtime_markers(request) == 1
    assert rest[-1].text.startswith("And page 124?" + RUNTIME_CONTEXT_MARKER)
    assert rest[0].role == "user"  # the kept rows start with a user row: no tool pair was split

    state = await dialog_state(session_id)
    assert state["summary"] == SUMMARY and 400 < state["summary_seq"] < 501 and state["failures"] == 0
    assert state["rows"] == 502  # 500 + the question + the answer: history is never deleted
    assert all(len(c) > 4000 for c in state["tool_contents"])  # pruning was request-only

    turn = await send(client, "Thanks.")  # the next turn needs no compaction: the summary holds
    assert turn["status"] == "completed" and "compacting" not in phases_of(client, turn["id"])
    assert len(provider.summary_requests()) == 1
    assert SUMMARY in provider.turn_requests()[-1].messages[0].text


@pytestmark_db
async def test_error_tool_results_survive_microcompact_and_nothing_is_stored(connect, start_worker, settings):
    small_window(settings, window=10_000)
    provider = SummaryGate([script_text("Done.")])
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await seed_tool_history(session_id, 40, tool_chars=2000, error_every=5)  # ≈ 25,000 estimated tokens
    worker = await start_worker(provider, tools=ToolRegistry())

    turn = await send(client, "Summarise the errors.")

    assert turn["status"] == "completed", turn["error"]
    assert provider.summary_requests() == []  # microcompact alone was enough
    assert "compacting" not in phases_of(client, turn["id"])
    [request] = provider.turn_requests()
    assert estimate_request(request.messages, worker.tools.definitions()) <= 10_000 * 0.8
    tool_results = results(request.messages)
    assert len(tool_results) == 40
    for n, result in enumerate(tool_results):
        if n % 5 == 0:  # every error result reaches the model whole
            assert (
                result.is_error
                and result.content == f"ERROR-{n}: the upstream refused this page (quota exceeded). " * 4
            )
        elif n >= 36:  # the newest ones too
            assert result.content.startswith(f"page {n}: ppp") and len(result.content) > 2000
        else:
            assert result.content == PRUNED_RESULT.format(chars=len(f"page {n}: ") + 2000)
    state = await dialog_state(session_id)
    assert (state["summary_seq"], state["failures"]) == (0, 0)
    assert all("pruned" not in c for c in state["tool_contents"])


@pytestmark_db
async def test_a_hanging_summary_call_ends_at_its_time_bound_visibly_and_the_dialog_goes_on(
    connect, start_worker, settings
):
    small_window(settings, compact_timeout=0.3)
    provider = SummaryGate(
        [script_text("Answer without a summary."), script_text("Second answer.")], hang=True
    )
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await seed_tool_history(session_id, 125, tool_chars=2000)
    worker = await start_worker(provider, tools=ToolRegistry())

    await client.send({"type": "message", "content": "Go on.", "client_msg_id": "h-1"})
    await provider.entered.wait()
    compacting = await client.until("turn_updated", lambda f: f["turn"]["phase"] == "compacting")
    notice = await client.until("notification", lambda f: "Automatic compaction failed" in f["content"])
    await client.until("turn_committed")

    assert notice["level"] == "warning" and notice["session_id"] == session_id
    assert "within 0.3 s" in notice["content"] and "goes on" in notice["content"]
    turn_id = compacting["turn"]["id"]
    final = [f["turn"] for f in client.of_type("turn_updated") if f["turn"]["id"] == turn_id][-1]
    assert final["status"] == "completed" and final["phase"] != "compacting"
    assert [b["text"] for b in final["blocks"] if b["type"] == "assistant"] == ["Answer without a summary."]
    [request] = provider.turn_requests()  # the turn went on with a shortened input that fits
    assert estimate_request(request.messages, worker.tools.definitions()) <= WINDOW
    assert runtime_markers(request) == 1 and [m.role for m in request.messages].count("system") == 1
    state = await dialog_state(session_id)
    assert (state["summary_seq"], state["failures"]) == (0, 1)

    turn = await send(client, "Still there?")  # the dialog still works
    assert turn["status"] == "completed", turn["error"]
    assert (await dialog_state(session_id))["failures"] == 2


@pytestmark_db
async def test_three_failures_in_a_row_switch_automatic_compaction_off_until_a_manual_compact(
    connect, start_worker, settings
):
    small_window(settings, compact_timeout=0.2)
    provider = SummaryGate([script_text("One."), script_text("Two.")], hang=True)
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await seed_tool_history(session_id, 125, tool_chars=2000, auto_compact_failures=2)
    await start_worker(provider, tools=ToolRegistry())

    await send(client, "First.")
    third = [f for f in client.of_type("notification") if "Automatic compaction failed" in f["content"]][-1]
    assert "After 3 failures in a row automatic compaction is off" in third["content"]
    assert (await dialog_state(session_id))["failures"] == 3
    assert len(provider.summary_requests()) == 1

    turn = await send(client, "Second.")
    assert turn["status"] == "completed", turn["error"]
    assert len(provider.summary_requests()) == 1  # no new attempt
    left_out = client.of_type("notification")[-1]
    assert left_out["level"] == "warning" and "older message(s) were left out" in left_out["content"]
    assert estimate_request(provider.turn_requests()[-1].messages) <= WINDOW

    outcome = await compact_dialog(session_id, ScriptedProvider([script_text(SUMMARY)]), keep=4, timeout=5)
    assert outcome.compacted
    assert (await dialog_state(session_id))["failures"] == 0  # a manual /compact turns it back on
