"""The cancel and failure tables of seed 003 §14.1/§14.2 and the stale-state rule of §8.3, one test
per row, through the whole gateway.

Each test asserts what the user saw — the turn's terminal snapshot (status, error text with its
``(ref …)``) — and what the database holds: the ``Message`` rows (role, content,
``completion_status``) and the ``InboxMessage`` row (status, error). Stops are checked by event
order, not by the clock: the slow tool or the silent stream is still blocked (it never produced
anything more) when the cancelled snapshot arrives.

Beside the rows of the tables: a tool result that finished before a stop or a fatal error of its
batch is kept; a provider's plain-text error body never reaches the user (kind, status and ref
only) and is logged on one redacted line; a library's ``TimeoutError`` is an internal error, not
the turn deadline; a storage error while the input is prepared is a context preparation failure.
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
from conversations.agent.tool_registry import Tool, ToolFatalError, ToolRegistry
from conversations.context import runtime_context
from conversations.models import Dialog, InboxMessage, Message
from conversations.runtime.turn_rows import CANCELLED_TOOL_RESULT
from conversations.runtime.turn_sinks import open_cli_chat_sink
from providers.chunks import Done, ReasoningDelta, TextDelta, ToolCallArgumentsDelta, ToolCallStart
from providers.errors import AuthenticationError, OverloadedError, ProviderConnectionError, ServerError
from providers.openai_compat import OpenAICompatProvider
from providers.testing import (
    LocalSSEServer,
    ScriptedProvider,
    SSEResponse,
    script_text,
    script_tool_call,
)
from tests.conversations.conftest import make_token

pytestmark = [pytest.mark.django_db(transaction=True)]

REF = re.compile(r"\(ref ([0-9a-f]{8})\)")
SILENCE = object()
"""In a :class:`SilentProvider` script: the stream goes silent here (headers sent, then nothing)."""


class SilentProvider(ScriptedProvider):
    """A scripted provider whose stream can go silent mid-response until it is cancelled.

    ``log`` records ``stream:silent`` when it goes quiet, ``stream:cancelled`` when the turn's
    cancellation reaches it, and ``stream:resumed`` if it ever went on by itself (it never does:
    nothing sets ``never``). With ``late`` chunks it swallows the cancellation and keeps
    streaming them (a misbehaving upstream), logging ``stream:late``.
    """

    def __init__(self, responses: list, *, late: list | None = None) -> None:
        super().__init__([])
        self.scripts = list(responses)
        self.late = late
        self.silent = asyncio.Event()
        self.never = asyncio.Event()
        self.log: list[str] = []

    async def _stream(self, request):
        self.requests.append(request)
        script = self.scripts[len(self.requests) - 1]
        if isinstance(script, BaseException):
            raise script
        for item in script:
            if item is SILENCE:
                self.log.append("stream:silent")
                self.silent.set()
                try:
                    await self.never.wait()
                except asyncio.CancelledError:
                    self.log.append("stream:cancelled")
                    if self.late is None:
                        raise
                    for chunk in self.late:
                        self.log.append("stream:late")
                        yield chunk
                    return
                self.log.append("stream:resumed")
                continue
            if isinstance(item, BaseException):
                raise item
            yield item


class Gate:
    """A tool that blocks until cancelled (or released), logging what happened to it."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, arguments: dict) -> str:
        self.log.append("tool:started")
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.log.append("tool:cancelled")
            raise
        self.log.append("tool:finished")
        return "opened"

    def registry(self) -> ToolRegistry:
        return ToolRegistry([Tool("gate", "waits", {"type": "object", "properties": {}}, self, timeout=600)])


async def clock(arguments: dict) -> str:
    return "12:00 UTC"


CLOCK = ToolRegistry([Tool("clock", "the time", {"type": "object", "properties": {}}, clock)])


@database_sync_to_async
def stored() -> dict:
    """The dialog's history rows and inbox rows (each test has one dialog)."""
    rows = [
        (m.role, m.content, m.completion_status, m.is_error, m.tool_call_id)
        for m in Message.objects.order_by("seq")
    ]
    ids = list(Message.objects.order_by("seq").values_list("id", flat=True))
    inbox = list(InboxMessage.objects.values_list("status", "error"))
    outcomes = list(InboxMessage.objects.values_list("outcome", flat=True))
    return {"rows": rows, "ids": [str(i) for i in ids], "inbox": inbox, "outcomes": outcomes}


async def begin(connect, start_worker, provider, content: str = "hi", **options):
    """Start a worker, connect, send one message; returns ``(client, session_id, worker)``."""
    worker = await start_worker(provider, **options)
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    await client.send({"type": "message", "content": content, "client_msg_id": "row-1"})
    return client, session_id, worker


async def terminal(client) -> dict:
    return (await client.until("turn_updated", lambda f: f["turn"]["status"] != "running"))["turn"]


def shows(kind: str, text: str | None = None):
    """A predicate: a snapshot with a ``kind`` block (whose text is ``text``, when given)."""

    def check(frame: dict) -> bool:
        return any(
            b["type"] == kind and (text is None or b.get("text") == text) for b in frame["turn"]["blocks"]
        )

    return check


def texts(turn: dict, kind: str = "assistant") -> list[str]:
    return [b["text"] for b in turn["blocks"] if b["type"] == kind]


ANY_OBJECT = {"type": "object", "properties": {}}


def calls(*pairs: tuple[str, str], arguments: str = "{}") -> list:
    """One model response that calls each ``(call_id, tool_name)`` with ``arguments``."""
    chunks: list = []
    for index, (call_id, name) in enumerate(pairs):
        chunks += [ToolCallStart(index, call_id, name), ToolCallArgumentsDelta(index, arguments)]
    return [*chunks, Done("tool_calls")]


def tool(name: str, handler) -> Tool:
    return Tool(name, name, ANY_OBJECT, handler, timeout=600)


def tool_blocks(turn: dict) -> list[tuple[str, str]]:
    return [(b["id"], b["status"]) for b in turn["blocks"] if b["type"] == "tool"]


# == Cancel (seed 003 §14.1) ====================================================================


async def test_cancel_row_stop_during_a_silent_stream_before_any_text(connect, start_worker):
    """No assistant text shown → nothing persisted for the assistant, status cancelled; the stop
    lands while the stream is still silent (it never produced anything more)."""
    provider = SilentProvider([[SILENCE]])
    client, session_id, _ = await begin(connect, start_worker, provider)
    await asyncio.wait_for(provider.silent.wait(), 10)
    await client.send({"type": "stop", "session_id": session_id})
    turn = await terminal(client)
    assert provider.log == ["stream:silent", "stream:cancelled"], "still silent when the turn ended"
    assert (turn["status"], turn["error"], turn["blocks"]) == ("cancelled", "stopped", [])
    committed = await client.until("turn_committed")
    assert [m["role"] for m in committed["messages"]] == ["user"]
    state = await stored()
    assert state["rows"] == [("user", "hi", "completed", False, None)]
    assert state["inbox"] == [("done", turn["error"])]  # the reason the snapshot showed
    assert state["outcomes"] == ["cancelled"]


async def test_cancel_row_stop_during_an_http_stream_that_sent_headers_then_nothing(connect, start_worker):
    """The same over real HTTP: the upstream answers 200 and then stays silent."""
    asked = asyncio.Event()

    def upstream(request):
        asked.set()
        return SSEResponse(stall_after=0)

    async with LocalSSEServer(handler=upstream) as server:
        provider = OpenAICompatProvider(
            server.base_url, "sk-test", "test-model", max_retries=0, first_byte_timeout=600, idle_timeout=600
        )
        client, session_id, _ = await begin(connect, start_worker, provider)
        await asyncio.wait_for(asked.wait(), 10)
        await client.send({"type": "message", "content": "/stop"})
        turn = await terminal(client)
        assert len(server.recorded) == 1, "one request, still unanswered when the turn ended"
    assert (turn["status"], turn["error"], turn["blocks"]) == ("cancelled", "stopped", [])
    state = await stored()
    assert [r[0] for r in state["rows"]] == ["user"]
    assert state["inbox"] == [("done", turn["error"])]  # the reason the snapshot showed


async def test_cancel_row_partial_text_shown_is_kept_as_cancelled(connect, start_worker):
    """Partial text shown → persisted with completion_status=cancelled, exactly as shown."""
    provider = SilentProvider([[TextDelta("Half"), TextDelta(" an answer"), SILENCE]])
    client, _, _ = await begin(connect, start_worker, provider)
    await client.until("turn_updated", shows("assistant", "Half an answer"))
    await client.send({"type": "message", "content": "/stop"})
    turn = await terminal(client)
    assert provider.log == ["stream:silent", "stream:cancelled"]
    assert (turn["status"], turn["error"], texts(turn)) == ("cancelled", "stopped", ["Half an answer"])
    state = await stored()
    assert state["rows"] == [
        ("user", "hi", "completed", False, None),
        ("assistant", "Half an answer", "cancelled", False, None),
    ]
    assert state["ids"][1] == turn["message_id"], "the partial is the turn's reply message"
    assert state["inbox"] == [("done", turn["error"])]  # the reason the snapshot showed


async def test_cancel_row_reasoning_alone_is_kept_as_a_cancelled_row_without_text(connect, start_worker):
    """Only reasoning shown (no assistant text) → an assistant row with that reasoning and no
    text, ``cancelled`` (issue 14: a stop keeps what was shown, over seed 003 §14.1's first
    version)."""
    provider = SilentProvider([[ReasoningDelta("Let me think about"), ReasoningDelta(" this"), SILENCE]])
    client, session_id, _ = await begin(connect, start_worker, provider)
    await client.until("turn_updated", shows("reasoning"))
    await client.send({"type": "stop", "session_id": session_id})
    turn = await terminal(client)
    assert turn["status"] == "cancelled" and texts(turn) == []
    state = await stored()
    assert state["rows"] == [
        ("user", "hi", "completed", False, None),
        ("assistant", "", "cancelled", False, None),
    ]
    assert state["ids"][1] == turn["message_id"]
    assert state["inbox"] == [("done", turn["error"])]  # the reason the snapshot showed


async def test_cancel_row_stop_during_a_slow_tool_keeps_the_chain_valid(connect, start_worker):
    """A stop during a slow tool ends the turn while the tool is still blocked; the call whose
    result never came gets an error result, so the history stays valid for the provider."""
    log: list[str] = []
    gate = Gate(log)
    provider = ScriptedProvider([script_tool_call("call_slow", "gate", {}, text="Let me check.")])
    client, session_id, _ = await begin(connect, start_worker, provider, tools=gate.registry())
    await asyncio.wait_for(gate.started.wait(), 10)
    await client.send({"type": "stop", "session_id": session_id})
    turn = await terminal(client)
    assert log == ["tool:started", "tool:cancelled"], "the tool never finished: the stop cut it"
    assert not gate.release.is_set()
    assert (turn["status"], turn["error"]) == ("cancelled", "stopped")
    assert [(b["id"], b["status"]) for b in turn["blocks"] if b["type"] == "tool"] == [
        ("call_slow", "failed")
    ]
    assert len(provider.requests) == 1
    state = await stored()
    assert state["rows"] == [
        ("user", "hi", "completed", False, None),
        ("assistant", "Let me check.", "cancelled", False, None),  # the stopped turn's last answer
        ("tool", CANCELLED_TOOL_RESULT, "completed", True, "call_slow"),
    ]
    assert state["inbox"] == [("done", turn["error"])]  # the reason the snapshot showed


async def test_cancel_row_a_finished_tool_chain_is_kept_and_the_next_partial_is_cancelled(
    connect, start_worker
):
    """Completed assistant/tool/result chains stay as they were; the unfinished answer after them
    is the cancelled partial."""
    provider = SilentProvider([script_tool_call("call_t", "clock", {}), [TextDelta("It is"), SILENCE]])
    client, session_id, _ = await begin(connect, start_worker, provider, tools=CLOCK)
    await client.until("turn_updated", shows("assistant", "It is"))
    await client.send({"type": "stop", "session_id": session_id})
    turn = await terminal(client)
    assert turn["status"] == "cancelled" and texts(turn) == ["It is"]
    assert [b["status"] for b in turn["blocks"] if b["type"] == "tool"] == ["completed"]
    state = await stored()
    assert state["rows"] == [
        ("user", "hi", "completed", False, None),
        ("assistant", "", "completed", False, None),
        ("tool", "12:00 UTC", "completed", False, "call_t"),
        ("assistant", "It is", "cancelled", False, None),
    ]
    assert state["ids"][3] == turn["message_id"]


async def test_cancel_row_late_deltas_after_the_stop_are_dropped(connect, start_worker):
    """An upstream that ignores the cancellation and keeps streaming: its late text is neither
    shown nor stored, and nothing follows the cancelled snapshot."""
    provider = SilentProvider([[TextDelta("Shown"), SILENCE]], late=[TextDelta(" LATE"), TextDelta(" MORE")])
    client, session_id, _ = await begin(connect, start_worker, provider)
    await client.until("turn_updated", shows("assistant", "Shown"))
    await client.send({"type": "stop", "session_id": session_id})
    turn = await terminal(client)
    assert provider.log == ["stream:silent", "stream:cancelled", "stream:late"]
    assert (turn["status"], texts(turn)) == ("cancelled", ["Shown"])
    await client.until("turn_committed")
    assert await client.communicator.receive_nothing(timeout=0.3)
    assert all("LATE" not in t for f in client.of_type("turn_updated") for t in texts(f["turn"]))
    state = await stored()
    assert state["rows"][1:] == [("assistant", "Shown", "cancelled", False, None)]


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
                return any(
                    b["type"] == "tool" and b["id"] == "s1" and b["status"] == "completed" for b in blocks
                )
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
        ("assistant", "", "cancelled", False, None),
        ("tool", CANCELLED_TOOL_RESULT, "completed", True, "g1"),
        ("tool", "stamped", "completed", False, "s1"),
    ]


# == Failure (seed 003 §14.2, seed 000 §13) ======================================================


async def test_failure_row_provider_failure_before_any_text(connect, start_worker):
    """Failed, the error names the provider failure and a ref; no assistant row."""
    client, _, _ = await begin(
        connect, start_worker, ScriptedProvider([OverloadedError("upstream overloaded", http_status=503)])
    )
    turn = await terminal(client)
    assert turn["status"] == "failed" and texts(turn) == []
    ref = REF.search(turn["error"]).group(1)
    # A 5xx shows its kind, status and ref only: the provider's words stay in the log.
    assert turn["error"] == f"The model provider is overloaded (overloaded, HTTP 503) (ref {ref})."
    state = await stored()
    assert state["rows"] == [("user", "hi", "completed", False, None)]
    assert state["inbox"] == [("done", turn["error"])]


async def test_failure_row_provider_failure_after_partial_text_keeps_it_interrupted(connect, start_worker):
    chunks = [TextDelta("Half an"), TextDelta(" answer"), ProviderConnectionError("connection reset")]
    client, _, _ = await begin(connect, start_worker, ScriptedProvider([chunks]))
    turn = await terminal(client)
    assert turn["status"] == "failed" and texts(turn) == ["Half an answer"]
    assert "(connection)" in turn["error"] and REF.search(turn["error"])
    state = await stored()
    assert state["rows"] == [
        ("user", "hi", "completed", False, None),
        ("assistant", "Half an answer", "interrupted", False, None),
    ]
    assert state["ids"][1] == turn["message_id"]
    assert state["inbox"] == [("done", turn["error"])]


async def test_failure_row_provider_failure_after_reasoning_only_creates_no_assistant_row(
    connect, start_worker
):
    chunks = [ReasoningDelta("Thinking"), ReasoningDelta(" hard"), OverloadedError("gone", http_status=529)]
    client, _, _ = await begin(connect, start_worker, ScriptedProvider([chunks]))
    turn = await terminal(client)
    assert turn["status"] == "failed" and "overloaded" in turn["error"] and REF.search(turn["error"])
    state = await stored()
    assert [r[0] for r in state["rows"]] == ["user"]
    assert state["inbox"][0][0] == "done"


async def test_failure_row_provider_failure_after_a_finished_tool_chain_keeps_the_chain(
    connect, start_worker
):
    provider = ScriptedProvider(
        [script_tool_call("call_t", "clock", {}), ServerError("bad gateway", http_status=502)]
    )
    client, _, _ = await begin(connect, start_worker, provider, tools=CLOCK)
    turn = await terminal(client)
    assert turn["status"] == "failed" and "server error (server_error, HTTP 502)" in turn["error"]
    assert REF.search(turn["error"])
    assert [b["status"] for b in turn["blocks"] if b["type"] == "tool"] == ["completed"]
    state = await stored()
    assert state["rows"] == [
        ("user", "hi", "completed", False, None),
        ("assistant", "", "completed", False, None),
        ("tool", "12:00 UTC", "completed", False, "call_t"),
    ]
    assert state["inbox"] == [("done", turn["error"])]


async def test_failure_row_a_commit_storage_refuses_is_never_completed_and_says_the_preview_was_not_saved(
    connect, start_worker, monkeypatch, caplog
):
    def broken_commit(*args, **kwargs):
        raise OperationalError("disk I/O error; dsn postgres://app:hunter2@db/picobot")

    monkeypatch.setattr(storage, "commit_turn", broken_commit)
    caplog.set_level(logging.WARNING, logger="conversations.runtime.executor")
    client, _, _ = await begin(connect, start_worker, ScriptedProvider([script_text("forty two")]))
    turn = await terminal(client)
    notice = await client.until("notification")
    assert turn["status"] == "failed" and texts(turn) == ["forty two"]
    assert "could not be saved" in turn["error"] and "not in the history" in turn["error"]
    ref = REF.search(turn["error"]).group(1)
    assert (
        notice["level"] == "error"
        and "not saved" in notice["content"]
        and f"(ref {ref})" in notice["content"]
    )
    frames = [str(f) for f in client.frames]
    assert not any("disk I/O" in f for f in frames), "the storage error stays in the log"
    assert not [f for f in client.of_type("turn_updated") if f["turn"]["status"] == "completed"]
    assert not client.of_type("turn_committed")
    state = await stored()
    assert state["rows"] == [("user", "hi", "completed", False, None)]
    assert state["inbox"] == [("done", turn["error"])]  # what the snapshot showed: the row's outcome
    logged = "\n".join(r.getMessage() for r in caplog.records if ref in r.getMessage())
    assert "disk I/O error" in logged and "hunter2" not in logged


async def test_failure_row_a_fatal_tool_error_fails_the_turn_and_keeps_its_cause_in_the_log(
    connect, start_worker, caplog
):
    async def vault(arguments: dict) -> str:
        raise ToolFatalError("vault unreachable at https://admin:pw0rd@vault.internal")

    tools = ToolRegistry([Tool("vault", "secrets", {"type": "object", "properties": {}}, vault)])
    caplog.set_level(logging.WARNING, logger="conversations.runtime.executor")
    client, _, _ = await begin(
        connect, start_worker, ScriptedProvider([script_tool_call("call_v", "vault", {})]), tools=tools
    )
    turn = await terminal(client)
    assert turn["status"] == "failed"
    ref = REF.search(turn["error"]).group(1)
    assert turn["error"] == f"A tool failed and the turn cannot go on (ref {ref})."
    state = await stored()
    assert state["rows"] == [
        ("user", "hi", "completed", False, None),
        ("assistant", "", "completed", False, None),
        ("tool", CANCELLED_TOOL_RESULT, "completed", True, "call_v"),
    ]
    assert state["inbox"] == [("done", turn["error"])]
    logged = "\n".join(r.getMessage() for r in caplog.records if ref in r.getMessage())
    assert "vault unreachable" in logged and "pw0rd" not in logged


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


async def test_failure_row_the_turn_deadline_keeps_the_shown_text_interrupted(
    connect, start_worker, settings
):
    settings.PICOBOT = settings.PICOBOT.replace(turn_timeout=0.5)
    provider = SilentProvider([[TextDelta("Slow"), SILENCE]])
    client, _, _ = await begin(connect, start_worker, provider)
    turn = await terminal(client)
    assert provider.log == ["stream:silent", "stream:cancelled"]
    assert turn["status"] == "failed" and texts(turn) == ["Slow"]
    assert turn["error"].startswith("The turn took longer than 0.5 s and was stopped") and REF.search(
        turn["error"]
    )
    state = await stored()
    assert state["rows"][1:] == [("assistant", "Slow", "interrupted", False, None)]
    assert state["inbox"] == [("done", turn["error"])]


async def test_a_timeout_error_inside_the_turn_is_not_reported_as_the_turn_deadline(connect, start_worker):
    provider = ScriptedProvider([[TextDelta("Before"), TimeoutError("a library timed out")]])
    client, _, _ = await begin(connect, start_worker, provider)
    turn = await terminal(client)
    ref = REF.search(turn["error"]).group(1)
    assert (turn["status"], turn["error"]) == ("failed", f"Internal error (ref {ref}).")
    state = await stored()
    assert state["rows"][1:] == [("assistant", "Before", "interrupted", False, None)]


async def test_failure_row_an_internal_error_shows_only_its_ref(connect, start_worker, caplog):
    chunks = [TextDelta("Before"), RuntimeError("boom; key sk-live-0123456789abcdef leaked")]
    caplog.set_level(logging.WARNING, logger="conversations.runtime.executor")
    client, _, _ = await begin(connect, start_worker, ScriptedProvider([chunks]))
    turn = await terminal(client)
    ref = REF.search(turn["error"]).group(1)
    assert (turn["status"], turn["error"]) == ("failed", f"Internal error (ref {ref}).")
    state = await stored()
    assert state["rows"][1:] == [("assistant", "Before", "interrupted", False, None)]
    assert state["inbox"] == [("done", turn["error"])]
    logged = "\n".join(r.getMessage() for r in caplog.records if ref in r.getMessage())
    assert "boom" in logged and "0123456789abcdef" not in logged and "sk-[redacted]" in logged


async def test_a_storage_error_while_preparing_the_input_is_a_context_preparation_failure(
    connect, start_worker, monkeypatch
):
    def broken(dialog_id: str) -> dict:
        raise OperationalError("database is locked")

    monkeypatch.setattr(runtime_context, "load_dialog_context", broken)
    provider = ScriptedProvider([script_text("never")])
    client, _, _ = await begin(connect, start_worker, provider)
    turn = await terminal(client)
    ref = REF.search(turn["error"]).group(1)
    assert (turn["status"], turn["error"]) == (
        "failed",
        f"The conversation could not be prepared for the model (ref {ref}).",
    )
    assert provider.requests == []
    state = await stored()
    assert state["rows"] == [("user", "hi", "completed", False, None)]
    assert state["inbox"] == [("done", turn["error"])]


class LibraryAbort(BaseException):
    """A library's own BaseException subclass (not an Exception, not a cancellation)."""


@pytest.mark.parametrize(
    "raised",
    [
        pytest.param(BaseExceptionGroup("unhandled errors in a TaskGroup", [GeneratorExit()]), id="group"),
        pytest.param(GeneratorExit("closed"), id="generator-exit"),
        pytest.param(LibraryAbort("abort"), id="base-exception"),
    ],
)
async def test_failure_row_a_base_exception_out_of_the_loop_fails_the_turn_and_the_dialog_goes_on(
    connect, start_worker, raised
):
    """QA 6b, B2: such an exception killed the executor task — the turn later read "interrupted
    by a server restart" and its rows were lost. It is an internal failure like any other."""
    provider = ScriptedProvider([[TextDelta("Before"), raised], script_text("second answer")])
    client, _, _ = await begin(connect, start_worker, provider)
    turn = await terminal(client)
    ref = REF.search(turn["error"]).group(1)
    assert (turn["status"], turn["error"]) == ("failed", f"Internal error (ref {ref}).")
    committed = await client.until("turn_committed")
    assert [m["role"] for m in committed["messages"]] == ["user", "assistant"]

    await client.send({"type": "message", "content": "again", "client_msg_id": "m-2"})
    second = await client.until(
        "turn_updated", lambda f: f["turn"]["status"] != "running" and f["turn"]["id"] != turn["id"]
    )
    assert second["turn"]["status"] == "completed", second["turn"]["error"]
    state = await stored()
    assert state["rows"][1] == ("assistant", "Before", "interrupted", False, None)
    assert state["rows"][-1][:3] == ("assistant", "second answer", "completed")
    assert state["inbox"] == [("done", turn["error"]), ("done", "")]
    assert state["outcomes"] == ["failed", "completed"]
    assert not client.of_type("notification"), "no restart notice: the turn was never interrupted"


async def test_failure_row_a_key_echoed_by_the_provider_is_redacted_for_the_user(connect, start_worker):
    error = AuthenticationError(
        "Incorrect API key provided: sk-live-0123456789abcdef",
        http_status=401,
        provider_code="invalid_api_key",
        provider_message="Incorrect API key provided: sk-live-0123456789abcdef",
    )
    client, _, _ = await begin(connect, start_worker, ScriptedProvider([error]))
    turn = await terminal(client)
    assert turn["status"] == "failed" and "authentication" in turn["error"] and REF.search(turn["error"])
    assert "0123456789abcdef" not in turn["error"] and "sk-[redacted]" in turn["error"]
    state = await stored()
    assert [r[0] for r in state["rows"]] == ["user"]
    assert "0123456789abcdef" not in state["inbox"][0][1]


PLAIN_500 = (
    'Traceback (most recent call last):\n  File "/srv/llm/gateway.py", line 42, in handle\n'
    "    upstream = connect('http://10.1.2.3:8080/v1?api_key=SECRET123')\n"
    "ConnectionRefusedError: [Errno 111] user=admin pass: hunter2 db=postgres://svc:pw@10.0.0.7/prod"
)
LEAKS = (
    "Traceback",
    "gateway.py",
    "10.1.2.3",
    "10.0.0.7",
    "SECRET123",
    "admin",
    "hunter2",
    "svc:pw",
    "/prod",
)


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


# == Stale state (seed 003 §8.3) ================================================================


@pytest.fixture
def short_leases(settings):
    """Leases short enough to expire within a test, renewed often while renewals work."""
    settings.PICOBOT = settings.PICOBOT.replace(lease_seconds=0.6, lease_renew_seconds=0.05)


def break_renewals(monkeypatch) -> None:
    """This worker's renewals fail from now on (its storage link is broken): the lease expires."""

    def renew(*args, **kwargs):
        raise OperationalError("renewal failed")

    monkeypatch.setattr(storage, "renew_worker_leases", renew)


async def take_over(session_id: str) -> int:
    """Another worker claims the dialog once the lease has lapsed and stays unrenewed (``claim_lease``)."""
    claim = database_sync_to_async(storage.claim_lease)
    lease = database_sync_to_async(
        lambda: Dialog.objects.values_list("lease_owner", "lease_expires_at").get(pk=session_id)
    )
    for _ in range(200):
        epoch = await claim(session_id, "thief:serve", 60_000, takeover=await lease())
        if epoch is not None:
            return epoch
        await asyncio.sleep(0.05)
    raise AssertionError("the lease never expired")


async def drain(client) -> None:
    while not await client.communicator.receive_nothing(timeout=0.2, interval=0.01):
        await client.recv()


async def executor_gone(worker, session_id: str) -> None:
    for _ in range(200):
        if session_id not in worker.executors:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the stale executor never ended")


async def test_stale_a_turn_taken_over_mid_tool_publishes_and_commits_nothing(
    connect, start_worker, monkeypatch, short_leases
):
    """The lease expires while a tool runs and another worker claims the dialog: the keeper sees the
    new epoch (or the loop does, after the tool batch) and the turn stops — no second provider call, no snapshot, no terminal,
    no commit; the inbox row stays ``started`` for the new owner to report."""
    log: list[str] = []
    gate = Gate(log)
    provider = ScriptedProvider([script_tool_call("call_g", "gate", {}), script_text("never asked")])
    client, session_id, worker = await begin(connect, start_worker, provider, tools=gate.registry())
    await asyncio.wait_for(gate.started.wait(), 10)
    await client.until("turn_updated", shows("tool"))
    await drain(client)
    seen = len(client.frames)
    break_renewals(monkeypatch)
    thief_epoch = await take_over(session_id)
    gate.release.set()  # the tool batch completes after the takeover
    await executor_gone(worker, session_id)
    # Stopped by the lease keeper's epoch read (the tool is cancelled) or after the batch.
    assert log[0] == "tool:started" and len(log) == 2
    assert await client.communicator.receive_nothing(timeout=0.5)
    assert client.frames[seen:] == [], "a stale owner publishes nothing after the takeover"
    assert all(f["turn"]["status"] == "running" for f in client.of_type("turn_updated"))
    assert len(provider.requests) == 1, "no provider call after the stale tool batch"
    state = await stored()
    assert state["rows"] == [("user", "hi", "completed", False, None)]
    assert state["inbox"] == [("started", "")]
    owner = await database_sync_to_async(
        lambda: Dialog.objects.values_list("lease_owner", "lease_epoch").get()
    )()
    assert owner == ("thief:serve", thief_epoch)


async def test_stale_a_turn_taken_over_before_its_provider_call_never_calls_it(
    connect, start_worker, monkeypatch, short_leases
):
    """The takeover happens while the turn is being set up: the check before the provider call
    stops it — the provider is never asked and the chat sees nothing of the turn."""
    opening, release = asyncio.Event(), asyncio.Event()

    async def held_sink(start):
        opening.set()
        await release.wait()
        return await open_cli_chat_sink(start)

    provider = ScriptedProvider([script_text("never asked")])
    client, session_id, worker = await begin(connect, start_worker, provider, sink_factory=held_sink)
    await asyncio.wait_for(opening.wait(), 10)
    await client.until("ack")
    await drain(client)
    seen = len(client.frames)
    break_renewals(monkeypatch)
    await take_over(session_id)
    release.set()
    await executor_gone(worker, session_id)
    await drain(client)
    assert client.frames[seen:] == [], "a stale owner publishes nothing after the takeover"
    assert provider.requests == []
    assert client.of_type("turn_updated") == [] and not client.of_type("turn_committed")
    state = await stored()
    assert state["rows"] == [("user", "hi", "completed", False, None)]
    assert state["inbox"] == [("started", "")]


async def test_a_stale_turns_row_is_reported_by_the_next_owner(
    connect, start_worker, monkeypatch, short_leases
):
    """The stale owner stays silent; whoever owns the dialog next reports the turn interrupted."""
    log: list[str] = []
    gate = Gate(log)
    provider = ScriptedProvider([script_tool_call("call_g", "gate", {})])
    client, session_id, worker = await begin(connect, start_worker, provider, tools=gate.registry())
    await asyncio.wait_for(gate.started.wait(), 10)
    break_renewals(monkeypatch)
    await take_over(session_id)
    gate.release.set()
    await executor_gone(worker, session_id)
    # The thief dies without running anything; its lease expires and this worker takes over.
    await database_sync_to_async(lambda: Dialog.objects.update(lease_expires_at=0))()
    monkeypatch.undo()
    worker.wake(session_id)
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "failed"
    state = await stored()
    assert state["inbox"][0][0] == "interrupted"
    assert [r[0] for r in state["rows"]] == ["user"]
