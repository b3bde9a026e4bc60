"""Regressions from the QA review of turn execution (issue 6): what a provider error may show, a
turn that grows past the context window after tool calls, overflow recovery after shown reasoning,
tool results that finished before a stop or a fatal error, the input fitting order, an oversized
summary, tool arguments in live snapshots, deleting a dialog during a turn, and typed failures.

Deterministic: scripted providers (``providers.testing``), tools that wait on events, no clocks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re

import pytest
from channels.db import database_sync_to_async
from django.db import OperationalError

from conversations import storage
from conversations.agent.failures import TurnFailure, TurnFailurePresenter
from conversations.agent.loop import AgentResult
from conversations.agent.tool_registry import Tool, ToolFatalError, ToolRegistry
from conversations.auth import get_or_create_user
from conversations.context import auto_compaction, turn_context
from conversations.context.compaction import MAX_SUMMARY_CHARS, clean_summary, summary_token_cap
from conversations.context.compaction_service import CompactionError, RowsSummary, compact_dialog
from conversations.context.overflow import overflowed_before_output
from conversations.context.pruning import TRUNCATED_RESULT, fit_request, truncate_tool_results
from conversations.context.tokens import estimate_messages, estimate_request
from conversations.context.turn_input import TOO_LONG, TurnInputBuilder
from conversations.models import Dialog, InboxMessage, Message
from conversations.runtime.turn_rows import CANCELLED_TOOL_RESULT
from conversations.storage import TurnStart, message_to_history_row
from delivery.events import ToolStarted
from delivery.presentation import PresentationPolicy, serialize_snapshot
from delivery.snapshot import TurnPhase
from delivery.turn import MAX_ARGUMENTS_BYTES, TurnController
from providers.blocks import ToolResultBlock, ToolUseBlock
from providers.chunks import Done, ReasoningDelta, TextDelta, ToolCallArgumentsDelta, ToolCallStart
from providers.errors import (
    AuthenticationError,
    BadResponseError,
    ContextOverflowError,
    RateLimitedError,
    ServerError,
)
from providers.messages import Message as ProviderMessage
from providers.openai_compat import OpenAICompatProvider
from providers.testing import LocalSSEServer, ScriptedProvider, SSEResponse, script_text
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]

REF = re.compile(r"\(ref ([0-9a-f]{8})\)")
ANY_OBJECT = {"type": "object", "properties": {}}
present = TurnFailurePresenter().present


# -- helpers -------------------------------------------------------------------------------------


def calls(*pairs: tuple[str, str], arguments: str = "{}") -> list:
    """One model response that calls each ``(call_id, tool_name)`` with ``arguments``."""
    chunks: list = []
    for index, (call_id, name) in enumerate(pairs):
        chunks += [ToolCallStart(index, call_id, name), ToolCallArgumentsDelta(index, arguments)]
    return [*chunks, Done("tool_calls")]


def tool(name: str, handler) -> Tool:
    return Tool(name, name, ANY_OBJECT, handler, timeout=600)


async def begin(connect, start_worker, provider, content: str = "hi", **options):
    """Start a worker, connect, send one message; returns ``(client, session_id, worker)``."""
    worker = await start_worker(provider, **options)
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await client.send({"type": "message", "content": content, "client_msg_id": "fix-1"})
    return client, session_id, worker


async def terminal(client) -> dict:
    return (await client.until("turn_updated", lambda f: f["turn"]["status"] != "running", timeout=20))["turn"]


@database_sync_to_async
def stored() -> dict:
    """Every history row (role, content, completion_status, is_error, tool_call_id) and inbox row."""
    rows = [(m.role, m.content, m.completion_status, m.is_error, m.tool_call_id) for m in Message.objects.order_by("seq")]
    inbox = list(InboxMessage.objects.order_by("position").values_list("status", "error"))
    return {"rows": rows, "inbox": inbox}


def tool_blocks(turn: dict) -> list[tuple[str, str]]:
    return [(b["id"], b["status"]) for b in turn["blocks"] if b["type"] == "tool"]


# == 1. provider errors: kind, status and ref only, unless a short structured 4xx ==============

PLAIN_500 = (
    "Traceback (most recent call last):\n  File \"/srv/llm/gateway.py\", line 42, in handle\n"
    "    upstream = connect('http://10.1.2.3:8080/v1?api_key=SECRET123')\n"
    "ConnectionRefusedError: [Errno 111] user=admin pass: hunter2 db=postgres://svc:pw@10.0.0.7/prod"
)
LEAKS = ("Traceback", "gateway.py", "10.1.2.3", "10.0.0.7", "SECRET123", "admin", "hunter2", "svc:pw", "/prod")


async def test_a_plain_text_500_body_never_reaches_the_user_and_is_logged_on_one_redacted_line(
    connect, start_worker, caplog
):
    caplog.set_level(logging.WARNING, logger="conversations.runtime.executor")
    response = SSEResponse(500, {"content-type": "text/plain"}, [PLAIN_500.encode()], chunked=False)
    async with LocalSSEServer([response]) as server:
        provider = OpenAICompatProvider(server.base_url, "sk-test", "test-model", max_retries=0)
        client, _, _ = await begin(connect, start_worker, provider)
        turn = await terminal(client)
        committed = await client.until("turn_committed")
    ref = REF.search(turn["error"]).group(1)
    assert turn["status"] == "failed"
    assert turn["error"] == f"The model provider had a server error (server_error, HTTP 500) (ref {ref})."
    assert [m["role"] for m in committed["messages"]] == ["user"]
    state = await stored()
    assert state["rows"] == [("user", "hi", "completed", False, None)]
    assert state["inbox"] == [("done", turn["error"])]
    frames = json.dumps(client.frames)
    assert not [leak for leak in LEAKS if leak in frames]
    [line] = [r.getMessage() for r in caplog.records if ref in r.getMessage()]
    assert "\n" not in line and "ConnectionRefusedError" in line and "gateway.py" in line
    assert not [leak for leak in ("SECRET123", "hunter2", "svc:pw", "user=admin") if leak in line]


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        pytest.param(
            RateLimitedError("Rate limit reached for requests", http_status=429, provider_code="rate_limit_exceeded"),
            "Rate limit reached for requests",
            id="structured-429-shown",
        ),
        pytest.param(
            AuthenticationError("Incorrect API key provided: sk-live-0123456789abcdef", http_status=401,
                                provider_code="invalid_api_key"),
            "Incorrect API key provided: sk-[redacted]",
            id="structured-401-shown-redacted",
        ),
        pytest.param(
            BadResponseError("x" * 201, http_status=400, provider_code="invalid_request_error"), None, id="too-long"
        ),
        pytest.param(BadResponseError("Request Entity Too Large", http_status=404), None, id="unstructured-4xx"),
        pytest.param(ServerError("The server had an error", http_status=500, provider_code="server_error"), None,
                     id="structured-5xx"),
        pytest.param(BadResponseError("weird 200", http_status=200, provider_code="x"), None, id="200-json-error"),
    ],
)
def test_only_a_short_structured_4xx_message_is_shown(error, shown):
    failure = TurnFailure.provider(error)
    text = present(failure)
    if shown is None:
        assert text == f"{text.split(' (ref ')[0]} (ref {failure.ref})." and ":" not in text.split(" (ref ")[0]
        assert error.message not in text
    else:
        assert text.endswith(f": {shown} (ref {failure.ref}).")


# == 2. a turn that grows past the window after tool calls ======================================


class WindowedProvider(ScriptedProvider):
    """A scripted provider with a context window: a request whose estimate is over ``window``
    tokens is refused with a context overflow (recorded in ``refused``, no script consumed)."""

    def __init__(self, responses, *, window: int) -> None:
        super().__init__(responses)
        self.window = window
        self.refused: list[int] = []
        self.accepted: list[int] = []

    async def _stream(self, request):
        estimate = estimate_request(request.messages, request.tools)
        if estimate > self.window:
            self.refused.append(estimate)
            raise ContextOverflowError(
                f"This model's maximum context length is {self.window} tokens", http_status=400,
                provider_code="context_length_exceeded",
            )
        self.accepted.append(estimate)
        async for chunk in super()._stream(request):
            yield chunk


BIG_RESULT = "D" * 12_000  # ≈ 3,430 estimated tokens: three of them overflow an 8,000-token window


async def dump(arguments: dict) -> str:
    return BIG_RESULT


DUMP = ToolRegistry([tool("dump", dump)])
THREE_DUMPS = calls(("d1", "dump"), ("d2", "dump"), ("d3", "dump"))


@pytest.fixture
def window_8000(settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_context_window=8000, auto_title_after=0)


async def test_a_request_after_large_tool_results_is_fitted_to_the_window_and_history_keeps_them(
    connect, start_worker, window_8000
):
    provider = WindowedProvider([THREE_DUMPS, script_text("Done reading.")], window=8000)
    client, _, _ = await begin(connect, start_worker, provider, tools=DUMP)
    turn = await terminal(client)
    assert turn["status"] == "completed", turn["error"]
    assert provider.refused == [] and len(provider.accepted) == 2
    assert max(provider.accepted) <= 8000 * 0.8
    second = provider.requests[1].messages
    results = [b for m in second for b in m.content if isinstance(b, ToolResultBlock)]
    assert [r.tool_call_id for r in results] == ["d1", "d2", "d3"]
    assert all(r.content.startswith("DDD") and "tool result cut to fit the context window" in r.content for r in results)
    state = await stored()
    assert [(r[0], r[1], r[4]) for r in state["rows"] if r[0] == "tool"] == [
        ("tool", BIG_RESULT, "d1"), ("tool", BIG_RESULT, "d2"), ("tool", BIG_RESULT, "d3"),
    ], "the stored history keeps the results whole"


async def test_an_overflow_at_a_later_iteration_is_retried_once_fitted_harder(connect, start_worker, window_8000):
    # The configured window (8,000) is larger than what the model takes (5,000): the fitted second
    # request still overflows, and is sent once more with half the budget.
    provider = WindowedProvider([THREE_DUMPS, script_text("Done reading.")], window=5000)
    client, _, _ = await begin(connect, start_worker, provider, tools=DUMP)
    turn = await terminal(client)
    assert turn["status"] == "completed", turn["error"]
    assert len(provider.refused) == 1 and 5000 < provider.refused[0] <= 8000 * 0.8
    assert len(provider.accepted) == 2 and provider.accepted[1] <= 8000 * 0.8 / 2
    assert [b["text"] for b in turn["blocks"] if b["type"] == "assistant"] == ["Done reading."]
    state = await stored()
    assert [r[0] for r in state["rows"]] == ["user", "assistant", "tool", "tool", "tool", "assistant"]


async def test_a_second_overflow_at_a_later_iteration_fails_clearly_and_keeps_the_tool_chain(
    connect, start_worker, window_8000
):
    provider = WindowedProvider([THREE_DUMPS, script_text("never")], window=2000)
    client, _, _ = await begin(connect, start_worker, provider, tools=DUMP)
    turn = await terminal(client)
    assert turn["status"] == "failed"
    assert turn["error"].startswith(f"{TOO_LONG}: the model refused this turn's input") and REF.search(turn["error"])
    assert "maximum context length" not in turn["error"]
    assert len(provider.refused) == 2, "the fitted request and one harder retry, never more"
    state = await stored()
    assert [(r[0], r[1]) for r in state["rows"]] == [
        ("user", "hi"), ("assistant", ""), ("tool", BIG_RESULT), ("tool", BIG_RESULT), ("tool", BIG_RESULT),
    ]
    assert state["inbox"] == [("done", turn["error"])]


def test_fit_request_prunes_older_results_then_cuts_the_largest_and_never_an_error_result_first():
    old_call = ProviderMessage.assistant("", tool_calls=[ToolUseBlock("o1", "dump", {})])
    new_call = ProviderMessage.assistant("", tool_calls=[ToolUseBlock("n1", "dump", {}), ToolUseBlock("n2", "dump", {})])
    messages = [
        ProviderMessage.system("sys"),
        ProviderMessage.user("question"),
        old_call,
        ProviderMessage.tool_result("o1", "O" * 3000, tool_name="dump"),
        new_call,
        ProviderMessage.tool_result("n1", "N" * 6000, tool_name="dump"),
        ProviderMessage.tool_result("n2", "Error: " + "E" * 3000, is_error=True, tool_name="dump"),
    ]
    fitted = fit_request(messages, 2000)
    assert estimate_messages(fitted) <= 2000
    old, newest, error = (m.content[0] for m in (fitted[3], fitted[5], fitted[6]))
    assert old.content == "[older tool result pruned: 3000 chars]"
    assert newest.content.startswith("N" * 100) and newest.content.endswith(" of 6000 chars kept]")
    assert error == messages[6].content[0], "an error result is cut only when nothing else helps"
    assert messages[5].content[0].content == "N" * 6000, "the input is not changed"
    assert fit_request(messages, 100_000) == messages


def test_truncate_tool_results_cuts_to_one_level_with_a_marker():
    messages = [
        ProviderMessage.user("q"),
        ProviderMessage.assistant("", tool_calls=[ToolUseBlock("a", "t", {}), ToolUseBlock("b", "t", {})]),
        ProviderMessage.tool_result("a", "A" * 7000, tool_name="t"),
        ProviderMessage.tool_result("b", "B" * 700, tool_name="t"),
    ]
    cut, count = truncate_tool_results(messages, 1200)
    assert count == 1 and estimate_messages(cut) <= 1200
    content = cut[2].content[0].content
    head = content.split("\n[")[0]
    assert set(head) == {"A"} and content == head + TRUNCATED_RESULT.format(kept=len(head), chars=7000)
    assert cut[3] is messages[3], "a result under the level stays whole"


# == 3. shown reasoning counts as output: no overflow retry after it ============================


async def test_an_overflow_after_shown_reasoning_is_not_retried(connect, start_worker):
    first = [ReasoningDelta("FIRST-ATTEMPT-REASONING "), ContextOverflowError("maximum context length", http_status=400)]
    provider = ScriptedProvider([first, script_text("second answer", reasoning="SECOND-ATTEMPT-REASONING")])
    client, _, _ = await begin(connect, start_worker, provider)
    turn = await terminal(client)
    assert len(provider.requests) == 1, "the reasoning was shown: the turn cannot start over unnoticed"
    assert turn["status"] == "failed" and turn["error"].startswith(TOO_LONG)
    assert [b["text"] for b in turn["blocks"] if b["type"] == "reasoning"] == ["FIRST-ATTEMPT-REASONING "]
    assert "SECOND-ATTEMPT" not in json.dumps(client.frames)
    state = await stored()
    assert [r[0] for r in state["rows"]] == ["user"]


def test_overflowed_before_output_treats_shown_reasoning_as_output():
    overflow = ContextOverflowError("too long", http_status=400)
    assert overflowed_before_output(AgentResult(error=overflow))
    assert not overflowed_before_output(AgentResult(error=overflow, shown_before_error=True))


# == 4. results that finished before a stop or a fatal error are kept ==========================


class Batch:
    """``gate`` blocks until cancelled; ``stamp`` answers at once; ``fatal`` raises once ``stamp``
    is shown completed (read from the running turn's own snapshot)."""

    def __init__(self) -> None:
        self.gate_started = asyncio.Event()
        self.gate_cancelled = asyncio.Event()
        self.worker = None

    async def gate(self, arguments: dict) -> str:
        self.gate_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.gate_cancelled.set()
            raise
        return "never"  # pragma: no cover

    async def stamp(self, arguments: dict) -> str:
        return "stamped"

    def stamp_shown(self) -> bool:
        for executor in self.worker.executors.values():
            running = executor.running
            if running is not None:
                blocks = running.controller.snapshot().blocks
                return any(b["type"] == "tool" and b["id"] == "s1" and b["status"] == "completed" for b in blocks)
        return False

    async def fatal(self, arguments: dict) -> str:
        for _ in range(500):
            if self.stamp_shown():
                break
            await asyncio.sleep(0.01)
        raise ToolFatalError("the vault is gone")

    def registry(self) -> ToolRegistry:
        return ToolRegistry([tool("gate", self.gate), tool("stamp", self.stamp), tool("fatal", self.fatal)])


async def test_a_stop_during_a_tool_batch_keeps_the_sibling_result_that_finished(connect, start_worker):
    batch = Batch()
    provider = ScriptedProvider([calls(("g1", "gate"), ("s1", "stamp"))])
    client, session_id, batch.worker = await begin(connect, start_worker, provider, tools=batch.registry())
    await client.until("turn_updated", lambda f: ("s1", "completed") in tool_blocks(f["turn"]))
    await asyncio.wait_for(batch.gate_started.wait(), 10)
    await client.send({"type": "stop", "session_id": session_id})
    turn = await terminal(client)
    assert turn["status"] == "cancelled" and batch.gate_cancelled.is_set()
    assert tool_blocks(turn) == [("g1", "failed"), ("s1", "completed")]
    state = await stored()
    assert state["rows"] == [
        ("user", "hi", "completed", False, None),
        ("assistant", "", "completed", False, None),
        ("tool", CANCELLED_TOOL_RESULT, "completed", True, "g1"),
        ("tool", "stamped", "completed", False, "s1"),
    ]


async def test_a_fatal_tool_error_keeps_the_sibling_result_that_finished(connect, start_worker):
    batch = Batch()
    provider = ScriptedProvider([calls(("f1", "fatal"), ("s1", "stamp"))])
    client, _, batch.worker = await begin(connect, start_worker, provider, tools=batch.registry())
    turn = await terminal(client)
    assert turn["status"] == "failed" and turn["error"].startswith("A tool failed and the turn cannot go on")
    assert tool_blocks(turn) == [("f1", "failed"), ("s1", "completed")]
    state = await stored()
    assert state["rows"] == [
        ("user", "hi", "completed", False, None),
        ("assistant", "", "completed", False, None),
        ("tool", CANCELLED_TOOL_RESULT, "completed", True, "f1"),
        ("tool", "stamped", "completed", False, "s1"),
    ]
    assert state["inbox"] == [("done", turn["error"])]


# == 5. the input shortens tool results before it leaves whole turns out =======================


@database_sync_to_async
def seed_rows(rows: list[dict]) -> TurnStart:
    owner = get_or_create_user("alice")[0]
    dialog = storage.active_dialog(owner, "cli_chat", "chat-alice")
    Message.objects.bulk_create([Message(dialog=dialog, seq=i + 1, **row) for i, row in enumerate(rows)])
    Dialog.objects.filter(pk=dialog.pk).update(history_revision=len(rows))
    dialog = Dialog.objects.get(pk=dialog.pk)
    history = [message_to_history_row(m) for m in Message.objects.filter(dialog=dialog).order_by("seq")]
    return TurnStart(
        dialog_id=dialog.id, channel=dialog.channel, chat_id=dialog.chat_id, title=dialog.title, inbox_id="inbox",
        turn_id="turn", reply_message_id="reply", user_message={}, history=history, summary="", summary_seq=0,
        history_revision=len(rows),
    )


U_ORDER = [  # the QA's u_order.py dialog: one earlier turn with a 3,000-character tool result
    {"role": "user", "content": "previous question " * 30},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "http_fetch", "arguments": {"url": "http://x"}}]},
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
        [m if m.role != "tool" else ProviderMessage.tool_result("c1", "[older tool result pruned: 3000 chars]",
                                                                 tool_name="http_fetch") for m in full.messages]
    )
    assert shortened < 400 < full.estimate
    prepared = await build.prepare(start, window_tokens=int(400 / build.threshold))
    assert prepared.dropped_messages == 0 and prepared.notices == ()
    assert prepared.pruned_results == 1 and prepared.estimate <= 400
    texts = [m.text for m in prepared.messages]
    assert "previous answer the user relies on" in texts and texts[1].startswith("previous question")
    (result,) = [b for m in prepared.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert result.content == "[older tool result pruned: 3000 chars]"


# == 6. an oversized summary is refused; summaries are capped ===================================


@database_sync_to_async
def seed_dialog(cycles: int, chars: int) -> Dialog:
    owner = get_or_create_user("alice")[0]
    dialog = storage.active_dialog(owner, "cli_chat", "chat-alice")
    rows = []
    for n in range(cycles):
        rows.append(Message(dialog=dialog, seq=2 * n + 1, role="user", content=f"topic {n}: " + "q" * chars))
        rows.append(Message(dialog=dialog, seq=2 * n + 2, role="assistant", content=f"about {n}: " + "a" * chars))
    rows.append(Message(dialog=dialog, seq=2 * cycles + 1, role="user", content="What now?"))
    Message.objects.bulk_create(rows)
    Dialog.objects.filter(pk=dialog.pk).update(history_revision=len(rows))
    return Dialog.objects.get(pk=dialog.pk)


@database_sync_to_async
def start_of(dialog_id: str) -> TurnStart:
    dialog = Dialog.objects.get(pk=dialog_id)
    rows = [message_to_history_row(m) for m in Message.objects.filter(dialog=dialog, seq__gt=dialog.summary_seq)]
    return TurnStart(
        dialog_id=dialog.id, channel=dialog.channel, chat_id=dialog.chat_id, title=dialog.title, inbox_id="inbox",
        turn_id="turn", reply_message_id="reply", user_message={}, history=rows, summary=dialog.summary,
        summary_seq=dialog.summary_seq, history_revision=dialog.history_revision,
    )


@database_sync_to_async
def reload(dialog_id: str) -> Dialog:
    return Dialog.objects.get(pk=dialog_id)


HUGE_SUMMARY = "S " * 20_000  # the QA's t_compact3.py: a model that returns 40,000 characters


async def test_an_oversized_summary_is_refused_and_the_turn_goes_on_without_it():
    dialog = await seed_dialog(30, 400)  # ≈ 7,000 estimated tokens; the window is 8,000 (share 6,400)
    provider = ScriptedProvider([script_text(HUGE_SUMMARY)])
    build = TurnInputBuilder(provider, system_prompt="sys", window_tokens=8000, keep_messages=4)
    prepared = await build.prepare(await start_of(dialog.id))

    assert prepared.compression is None, "a summary over half the budget is not used"
    assert prepared.dropped_messages > 0 and prepared.estimate <= 8000 * 0.8
    assert not any("S S S" in m.text for m in prepared.messages)
    [notice] = prepared.notices
    assert notice.startswith("Automatic compaction failed: The model's summary was too long to use")
    after = await reload(dialog.id)
    assert (after.summary, after.summary_seq, after.auto_compact_failures) == ("", 0, 1)
    cap = summary_token_cap(int(8000 * 0.8))
    assert provider.requests[0].max_tokens == 2 * cap
    assert f"at most about {cap:,} tokens" in provider.requests[0].messages[-1].text


async def test_an_automatic_summary_cut_off_at_max_tokens_is_refused_and_the_turn_goes_on_without_it():
    """QA 6: finish_reason "length" means the summary stops mid-sentence; it must not replace the
    history it summarises (the failure is visible as the automatic compaction notice)."""
    dialog = await seed_dialog(30, 400)
    provider = ScriptedProvider([script_text("The user asked about topic 1 and then the", finish_reason="length")])
    build = TurnInputBuilder(provider, system_prompt="sys", window_tokens=8000, keep_messages=4)
    prepared = await build.prepare(await start_of(dialog.id))

    assert prepared.compression is None
    [notice] = prepared.notices
    assert notice.startswith("Automatic compaction failed: The model's summary was cut off at its output limit")
    after = await reload(dialog.id)
    assert (after.summary, after.summary_seq, after.auto_compact_failures) == ("", 0, 1)


async def test_a_manual_compact_refuses_an_oversized_summary(settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_context_window=8000)
    dialog = await seed_dialog(30, 400)
    with pytest.raises(CompactionError, match="too long to use"):
        await compact_dialog(dialog.id, ScriptedProvider([script_text(HUGE_SUMMARY)]), keep=4)
    after = await reload(dialog.id)
    assert (after.summary, after.summary_seq) == ("", 0)


def test_clean_summary_cuts_a_runaway_summary():
    summary = clean_summary("word " * 10_000)
    assert len(summary) <= MAX_SUMMARY_CHARS and summary.endswith("word…")
    assert clean_summary("  short summary  ") == "short summary"
    assert len(clean_summary("x" * 500, max_chars=100)) == 100


# == 7. tool arguments in live snapshots ========================================================


def test_a_snapshot_shows_non_object_arguments_as_an_empty_object_and_bounds_large_ones():
    controller = TurnController("t1", "cli_chat:u1:d1", "m1")
    controller.apply(ToolStarted(0, "c1", "search", "{not json"))
    controller.apply(ToolStarted(0, "c2", "search", {"query": "q" * 10_000}))
    controller.apply(ToolStarted(0, "c3", "search", {"query": "fine"}))
    blocks = controller.snapshot().to_dict()["blocks"]
    size = len(json.dumps({"query": "q" * 10_000}, separators=(",", ":")).encode())
    assert size > MAX_ARGUMENTS_BYTES
    assert [b["arguments"] for b in blocks] == [{}, {"_truncated": f"{size} bytes"}, {"query": "fine"}]
    assert len(serialize_snapshot(controller.snapshot(), PresentationPolicy.websocket())) < 2000


async def test_history_keeps_large_arguments_that_the_snapshot_bounds(connect, start_worker):
    big = json.dumps({"query": "q" * 20_000})

    async def search(arguments: dict) -> str:
        return "nothing found"

    provider = ScriptedProvider([calls(("c1", "search"), arguments=big), script_text("No luck.")])
    tools = ToolRegistry([Tool("search", "search", {"type": "object"}, search)])
    client, _, _ = await begin(connect, start_worker, provider, tools=tools)
    turn = await terminal(client)
    assert turn["status"] == "completed"
    size = len(json.dumps(json.loads(big), ensure_ascii=False, separators=(",", ":")).encode())
    shown = [b["arguments"] for f in client.of_type("turn_updated") for b in f["turn"]["blocks"] if b["type"] == "tool"]
    assert shown and all(arguments == {"_truncated": f"{size} bytes"} for arguments in shown)
    committed = await client.until("turn_committed")
    assert committed["messages"][1]["tool_calls"][0]["arguments"] == json.loads(big), "history keeps them"


# == 8. deleting a dialog during a turn is a generation change ==================================


def started_turn(worker_id: str = "w1") -> tuple[Dialog, int]:
    owner = get_or_create_user("alice")[0]
    dialog = storage.active_dialog(owner, "cli_chat", str(owner.pk))
    storage.accept_message(owner, "cli_chat", str(owner.pk), "running", client_msg_id="del-1")
    storage.accept_message(owner, "cli_chat", str(owner.pk), "queued", client_msg_id="del-2")
    epoch = storage.claim_lease(dialog.id, worker_id, 60_000)
    storage.start_next_turn(dialog.id, worker_id, epoch)
    return dialog, epoch


def test_deleting_a_dialog_ends_its_lease_generation_and_its_started_row():
    dialog, epoch = started_turn()
    owner = dialog.owner
    result = storage.delete_dialog(owner, "cli_chat", str(owner.pk), dialog.id)
    assert result.running_turn and result.dropped_queued == 1
    assert storage.renew_worker_leases("w1", 60_000) == 0
    assert storage.lease_epochs([dialog.id])[dialog.id] != ("w1", epoch), "the keeper sees the loss"
    with pytest.raises(storage.LeaseLostError):
        storage.commit_turn(dialog.id, "w1", epoch, "x", [])
    assert storage.claim_lease(dialog.id, "w1", 60_000) is None
    assert storage.dialogs_needing_work("w1") == []
    rows = list(InboxMessage.objects.order_by("position").values_list("status", "error", "notice_sent_at"))
    assert [(s, e) for s, e, _ in rows] == [("done", "the dialog was deleted")] * 2
    assert rows[0][2] is not None, "no 'interrupted by a restart' notice for it, ever"
    assert storage.pending_interrupted_notices("cli_chat", str(owner.pk)) == []


# == 9. typed failures, the phase after compacting, the left-out notice =========================


async def test_a_timeout_error_inside_the_turn_is_not_reported_as_the_turn_deadline(connect, start_worker):
    provider = ScriptedProvider([[TextDelta("Before"), TimeoutError("a library timed out")]])
    client, _, _ = await begin(connect, start_worker, provider)
    turn = await terminal(client)
    ref = REF.search(turn["error"]).group(1)
    assert (turn["status"], turn["error"]) == ("failed", f"Internal error (ref {ref}).")
    state = await stored()
    assert state["rows"][1:] == [("assistant", "Before", "interrupted", False, None)]


async def test_a_storage_error_while_preparing_the_input_is_a_context_preparation_failure(
    connect, start_worker, monkeypatch
):
    def broken(dialog_id: str) -> dict:
        raise OperationalError("database is locked")

    monkeypatch.setattr(turn_context, "load_dialog_context", broken)
    provider = ScriptedProvider([script_text("never")])
    client, _, _ = await begin(connect, start_worker, provider)
    turn = await terminal(client)
    ref = REF.search(turn["error"]).group(1)
    assert (turn["status"], turn["error"]) == (
        "failed", f"The conversation could not be prepared for the model (ref {ref}).",
    )
    assert provider.requests == []
    state = await stored()
    assert state["rows"] == [("user", "hi", "completed", False, None)]
    assert state["inbox"] == [("done", turn["error"])]


def test_after_compacting_the_phase_goes_on_to_responding_not_back_to_queued():
    controller = TurnController("t1", "cli_chat:u1:d1", "m1")
    assert controller.begin_compacting() and controller.phase is TurnPhase.COMPACTING
    assert controller.end_compacting() and controller.phase is TurnPhase.RESPONDING


async def test_the_left_out_notice_does_not_suggest_compact_right_after_a_compaction(monkeypatch):
    dialog = await seed_dialog(30, 400)
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
