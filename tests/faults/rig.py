"""The in-process fault rig: a real turn through the whole gateway, with one fault injected.

The gateway is the real one (``AgentWorker`` + ``ChatConsumer`` over Channels communicators, the
real storage on the test database, the real ``OpenAICompatProvider`` against a local HTTP server).
Every scenario runs the same two turns, so each invariant has something to bite on:

* A: "look it up" → the model calls ``lookup``, reads its result, answers (the fault hits here);
  A is then sent again with the same ``client_msg_id`` (acknowledged, never run again);
* B: another question → the same tool round trip, then an answer (the dialog goes on after the fault).

The fault plugs into the run through a :class:`FaultPlan`. What happened is collected into an
:class:`~tests.faults.invariants.Observation`: frames (stamped), commits (stamped with the same
counter), the rows, the provider's requests, a new connection's ``ready.running``, memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async

from conversations import storage
from conversations.models import InboxMessage, Message
from conversations.tools import default_registry
from providers.messages import RUNTIME_CONTEXT_MARKER
from providers.openai_compat import OpenAICompatProvider
from providers.testing import (
    LocalSSEServer,
    RecordedRequest,
    SSEResponse,
    openai_events,
    split_events,
    sse_body,
)
from tests.conversations.conftest import ChatClient, make_token
from tests.faults import serve_plugin
from tests.faults.invariants import Observation, Sent

STAMPS = itertools.count()
"""One counter for frames received and commits returned: their order across threads."""

LOOKUP = serve_plugin.LOOKUP
FIRST = Sent("fault-a", "First question: look it up.", watcher=0)
SECOND = Sent("fault-b", "Second question: look it up again.", watcher=0)
ANSWER_A = " ".join(f"a{n}" for n in range(40))
ANSWER_B = "The second answer."
SETTLE_SECONDS = 30.0
TRACED_LIMIT_BYTES = 32 * 1024 * 1024
"""Peak traced memory of one scenario (Python allocations of the server, the client and the mock
provider together); a healthy run peaks at a few MiB above the huge answers it streams."""


class RecordingClient(ChatClient):
    """A chat client whose frames carry a stamp from :data:`STAMPS`; ``read_delay`` seconds
    before each read makes it a slow reader."""

    def __init__(self, communicator: Any, read_delay: float = 0.0) -> None:
        super().__init__(communicator)
        self.stamped: list[tuple[int, dict]] = []
        self.read_delay = read_delay

    async def recv(self, timeout: float = 10) -> dict:
        if self.read_delay:
            await asyncio.sleep(self.read_delay)
        frame = await super().recv(timeout)
        self.stamped.append((next(STAMPS), frame))
        return frame

    def unread(self) -> int:
        """Frames the server sent that this client has not read (the communicator's queue)."""
        return self.communicator.output_queue.qsize()

    @property
    def alive(self) -> bool:
        """False once the communicator's application ended (a receive timeout ends it too)."""
        return not self.communicator.future.done()

    async def drain(self) -> None:
        """Read everything the server sent up to now (a ping's answer comes after it)."""
        if not self.alive:
            return
        await self.send({"type": "ping", "nonce": "drain"})
        await self.until("pong", timeout=SETTLE_SECONDS)


@dataclass
class FaultPlan:
    """How one fault plugs into the standard run (every part optional).

    Attributes:
        after_tool: turn A's answer after its tool result, per attempt (1, 2, …); default: a
            plain answer.
        setup: awaited once the rig exists, before the worker starts (monkeypatches, settings).
        enter / leave: called before A is sent / once A's inbox row has ended (a window).
        worker_options: extra ``AgentWorker`` arguments (``sink_factory``).
        read_delay: seconds the sending client waits before each read (a slow client).
        lurker: connect a second client of the chat that reads nothing until the end.
        answer_words: words of A's default answer (a long one streams many snapshots).
        answer_delay: seconds between the pieces of A's default answer.
        during: awaited once A is acknowledged (while A runs), before A's end is awaited.
        cleanup: awaited at the end, whatever happened.
    """

    after_tool: Callable[[int], SSEResponse] | None = None
    setup: Callable[[Rig], Awaitable[None]] | None = None
    enter: Callable[[Rig], None] | None = None
    leave: Callable[[Rig], None] | None = None
    worker_options: dict = field(default_factory=dict)
    read_delay: float = 0.0
    lurker: bool = False
    answer_words: int = 40
    answer_delay: float = 0.0
    during: Callable[[Rig], Awaitable[None]] | None = None
    cleanup: Callable[[Rig], Awaitable[None]] | None = None


def answer_response(text: str, *, delay: float = 0.0) -> SSEResponse:
    return SSEResponse(pieces=split_events(sse_body(openai_events(text))), delay=delay)


def lookup_call(call_id: str) -> SSEResponse:
    return SSEResponse(pieces=split_events(sse_body(openai_events(tool_calls=[(call_id, LOOKUP, "{}")]))))


def user_text(message: dict) -> str:
    """A request message's text without the runtime context the server appends (DESIGN §6)."""
    content = message.get("content") or ""
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content.split(RUNTIME_CONTEXT_MARKER)[0]


def request_messages(body: dict) -> list[dict]:
    """An OpenAI-style request's messages in the form ``Observation.requests`` holds."""
    return [
        {
            "role": m.get("role"),
            "text": user_text(m) if m.get("role") == "user" else "",
            "calls": [call["id"] for call in m.get("tool_calls") or []],
            "result_for": m.get("tool_call_id"),
        }
        for m in body.get("messages", [])
    ]


def lookup_registry() -> Any:
    """The built-in tools plus ``lookup`` (answers at once) and ``slow_tool``: what ``serve``
    gets from ``serve_plugin``."""
    registry = default_registry([])
    serve_plugin.register(registry)
    return registry


@database_sync_to_async
def read_rows() -> tuple[list[dict], list[dict]]:
    """The inbox rows and the history rows (``Observation.inbox`` / ``.messages``)."""
    inbox = [
        {
            "id": str(row.id),
            "client_msg_id": row.client_msg_id,
            "turn_id": str(row.turn_id) if row.turn_id else None,
            "reply_message_id": str(row.reply_message_id) if row.reply_message_id else None,
            "status": row.status,
            "outcome": row.outcome,
            "content": row.content,
        }
        for row in InboxMessage.objects.order_by("received_at")
    ]
    messages = [
        {
            "id": str(row.id),
            "seq": row.seq,
            "role": row.role,
            "content": row.content,
            "turn_id": str(row.turn_id) if row.turn_id else None,
            "completion_status": row.completion_status,
            "tool_calls": [call.get("id") for call in row.tool_calls or []],
            "tool_call_id": row.tool_call_id or None,
        }
        for row in Message.objects.order_by("dialog_id", "seq")
    ]
    return inbox, messages


class Rig:
    """One in-process scenario: the worker, the clients, the mock provider, the records."""

    def __init__(
        self, plan: FaultPlan, connect: Callable, start_worker: Callable, monkeypatch: Any, settings: Any
    ) -> None:
        self.plan = plan
        self.settings = settings
        self.connect = connect
        self.start_worker = start_worker
        self.monkeypatch = monkeypatch
        self.commits: list[tuple[int, str]] = []
        self.clients: list[RecordingClient] = []
        self.bounds: dict[str, tuple[float, float]] = {}
        self.attempts: dict[str, int] = {}
        self.worker: Any = None
        self.real_commit = storage.commit_turn
        self.commit = self.real_commit
        """What the executor's commit calls; a database fault wraps ``real_commit`` here."""

        def committing(*args: Any, **kwargs: Any) -> Any:
            result = self.commit(*args, **kwargs)
            self.commits.append((next(STAMPS), args[3]))  # returned: the transaction committed
            return result

        monkeypatch.setattr(storage, "commit_turn", committing)

    async def llm(self, request: RecordedRequest) -> SSEResponse:
        """The mock provider: a ``lookup`` call, then (after its result) the answer of each turn."""
        body = request.json() or {}
        messages = body.get("messages", [])
        users = [m for m in messages if m.get("role") == "user"]
        turn = "A" if users and user_text(users[-1]) == FIRST.content else "B"
        if messages and messages[-1].get("role") == "tool":
            if turn == "B":
                return answer_response(ANSWER_B)
            self.attempts[turn] = attempt = self.attempts.get(turn, 0) + 1
            if self.plan.after_tool is not None:
                return self.plan.after_tool(attempt)
            words = " ".join(f"a{n}" for n in range(self.plan.answer_words))
            return answer_response(words, delay=self.plan.answer_delay)
        return lookup_call(f"call_{turn}_{len(messages)}")

    async def client(self, read_delay: float = 0.0) -> RecordingClient:
        """A new connection of the chat (user alice), once it received ``ready``."""
        base = await self.connect(await make_token())
        client = RecordingClient(base.communicator, read_delay)
        self.clients.append(client)
        await client.until("ready")
        return client

    async def send(self, client: RecordingClient, sent: Sent) -> dict:
        await client.send({"type": "message", "content": sent.content, "client_msg_id": sent.client_msg_id})
        return await client.until("ack", lambda f: f["client_msg_id"] == sent.client_msg_id, timeout=20)

    async def row_ended(self, sent: Sent, timeout: float = SETTLE_SECONDS) -> dict | None:
        """``sent``'s inbox row once it ended (not queued, not started); None after ``timeout``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while True:
                    inbox, _ = await read_rows()
                    rows = [r for r in inbox if r["client_msg_id"] == sent.client_msg_id]
                    if rows and rows[0]["status"] not in ("queued", "started"):
                        return rows[0]
                    await asyncio.sleep(0.05)
        return None

    async def final_of(self, client: RecordingClient, turn_id: str | None) -> None:
        """Read until ``turn_id``'s terminal snapshot and ``turn_committed`` arrived (or give up:
        the invariants judge what did)."""

        def final(frame: dict) -> bool:
            return (
                frame["type"] == "turn_updated"
                and frame["turn"]["id"] == turn_id
                and frame["turn"]["status"] != "running"
            )

        if turn_id is None or not client.alive or any(final(f) for f in client.frames):
            return
        with contextlib.suppress(AssertionError):
            await client.until(
                "turn_updated",
                lambda f: f["turn"]["id"] == turn_id and f["turn"]["status"] != "running",
                timeout=SETTLE_SECONDS,
            )

    async def run(self) -> Observation:
        plan = self.plan
        try:
            return await self._run()
        finally:
            if plan.cleanup is not None:
                await plan.cleanup(self)

    async def _run(self) -> Observation:
        plan = self.plan
        if plan.setup is not None:
            await plan.setup(self)
        tracemalloc.start()
        try:
            async with LocalSSEServer(handler=self.llm) as llm:
                provider = OpenAICompatProvider(
                    llm.base_url,
                    "sk-test",
                    "test-model",
                    max_retries=2,
                    retry_backoff=0.01,
                    connect_timeout=2.0,
                    first_byte_timeout=2.0,
                    idle_timeout=0.3,
                )
                self.worker = await self.start_worker(
                    provider, tools=lookup_registry(), **plan.worker_options
                )
                sender = await self.client(plan.read_delay)
                lurker = await self.client() if plan.lurker else None
                if plan.enter is not None:
                    plan.enter(self)
                await self.send(sender, FIRST)
                if plan.during is not None:
                    await plan.during(self)
                row_a = await self.row_ended(FIRST)
                if plan.leave is not None:
                    plan.leave(self)
                if lurker is None:
                    await self.final_of(sender, row_a and row_a["turn_id"])
                await self.send(sender, FIRST)  # the same client_msg_id again: acknowledged, never run
                await self.send(sender, SECOND)
                row_b = await self.row_ended(SECOND)
                await self.final_of(sender, row_a and row_a["turn_id"])
                await self.final_of(sender, row_b and row_b["turn_id"])
                if lurker is not None:
                    self.bounds["frames unread by a non-reading client"] = (lurker.unread(), 20)
                    await lurker.drain()
                await sender.drain()
                late = await self.client()
                running_after = late.frames[0]["running"]
                await late.drain()
                requests = [request_messages(r.json() or {}) for r in llm.recorded]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.bounds["peak traced memory, bytes"] = (peak, TRACED_LIMIT_BYTES)
        inbox, messages = await read_rows()
        return Observation(
            sent=[FIRST, SECOND],
            frames=[client.stamped for client in self.clients],
            commits=list(self.commits),
            inbox=inbox,
            messages=messages,
            requests=requests,
            running_after=running_after,
            bounds=self.bounds,
        )


def dumps(obs: Observation) -> str:
    """An observation for a failure message (frames by type only)."""
    short = {
        "inbox": [(r["client_msg_id"], r["status"], r["outcome"]) for r in obs.inbox],
        "messages": [
            (m["role"], m["content"][:30], m["completion_status"], m["tool_calls"]) for m in obs.messages
        ],
        "frames": [
            [
                f["type"]
                + (":" + f["turn"]["status"] if f["type"] == "turn_updated" else "")
                + (":" + f.get("content", "")[:50] if f["type"] in ("notification", "error") else "")
                + (":" + str(f.get("id")) if f["type"] == "notification" else "")
                for _, f in client
                if not (f["type"] == "turn_updated" and f["turn"]["status"] == "running")
            ]
            for client in obs.frames
        ],
        "running snapshots": [
            len([1 for _, f in c if f["type"] == "turn_updated" and f["turn"]["status"] == "running"])
            for c in obs.frames
        ],
        "requests": [
            [(m["role"], m["text"][:20], m["calls"], m["result_for"]) for m in r] for r in obs.requests
        ],
        "bounds": obs.bounds,
        "commits": len(obs.commits or []),
    }
    return json.dumps(short, default=str)
