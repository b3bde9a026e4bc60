"""The in-process faults (provider, database, channel layer, sink) as :class:`~tests.faults.rig.FaultPlan` s.

Each plan injects its fault at one seam the product already has: the mock provider's HTTP
responses, the storage functions the executor calls through the ``storage`` namespace, the
channel layer's ``send``/``group_send``/``expiry``, the worker's ``sink_factory``, how a client
reads. Turn A is the one hit (``rig.FIRST``); turn B shows the dialog goes on.
"""

from __future__ import annotations

import json
import time
from typing import Any

from channels.layers import get_channel_layer
from django.db import OperationalError, transaction

from conversations.runtime.turn_sinks import open_cli_chat_sink
from delivery.platforms.cli_chat import CliChatSink
from providers.testing import SSEResponse, openai_events, split_events, sse_body
from tests.faults.rig import ANSWER_A, FaultPlan, Rig, answer_response

PARTIAL = "Half an answer that"


def partial_pieces(text: str = PARTIAL) -> list[bytes]:
    """The first events of a streamed answer (role chunk, a word each), no finish, no [DONE]."""
    return split_events(sse_body(openai_events(text, usage=None, done=False)[:-1]))


def server_error() -> SSEResponse:
    body = json.dumps({"error": {"message": "The server had an error", "type": "server_error"}}).encode()
    return SSEResponse(500, {"content-type": "application/json"}, [body], chunked=False)


def retried_after(first: SSEResponse) -> Any:
    """``first`` on attempt 1, the whole answer on any retry."""
    return lambda attempt: first if attempt == 1 else answer_response(ANSWER_A)


def huge_answer(attempt: int) -> SSEResponse:
    chunk = "x" * (1024 * 1024)
    events = openai_events("")[:1] + [
        {"choices": [{"index": 0, "delta": {"content": chunk}, "finish_reason": None}]} for _ in range(4)
    ]
    events += openai_events("")[-3:]  # finish, usage, [DONE]
    return SSEResponse(pieces=split_events(sse_body(events)))


def dripping_answer(attempt: int) -> SSEResponse:
    body = sse_body(openai_events(ANSWER_A))
    return SSEResponse(pieces=[body[i : i + 24] for i in range(0, len(body), 24)], delay=0.002)


def malformed_answer(attempt: int) -> SSEResponse:
    return SSEResponse(pieces=[*partial_pieces(), b'data: {"choices": [{"delta": {"content": "x"\n\n'])


# --- database ----------------------------------------------------------------------------------


def fail_first_commits(times: int, message: str) -> Any:
    async def setup(rig: Rig) -> None:
        failures = {"left": times}

        def commit(*args: Any, **kwargs: Any) -> Any:
            if failures["left"] > 0:
                failures["left"] -= 1
                raise OperationalError(message)
            return rig.real_commit(*args, **kwargs)

        rig.commit = commit

    return setup


async def fail_first_turn_commit(rig: Rig) -> None:
    """Every attempt of the first turn's commit fails (the retries and after)."""
    first: list[str] = []

    def commit(*args: Any, **kwargs: Any) -> Any:
        first[:] = first or [args[3]]
        if args[3] == first[0]:
            raise OperationalError("disk I/O error")
        return rig.real_commit(*args, **kwargs)

    rig.commit = commit


async def failing_turn_starts(rig: Rig) -> None:
    from conversations import storage

    real_start = storage.start_next_turn
    failures = {"left": 6}  # past the first try and its 3 retries: the chat is alerted

    def start(*args: Any, **kwargs: Any) -> Any:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise OperationalError("disk I/O error")
        return real_start(*args, **kwargs)

    rig.monkeypatch.setattr(storage, "start_next_turn", start)


async def slow_first_commit(rig: Rig) -> None:
    """The first commit holds its transaction for twice the lease (``lease_seconds`` made 1 s)."""
    from django.conf import settings

    rig.settings.PICOBOT = settings.PICOBOT.replace(lease_seconds=1.0, lease_renew_seconds=0.5)
    slow = {"left": 1}

    def commit(*args: Any, **kwargs: Any) -> Any:
        if slow["left"] == 0:
            return rig.real_commit(*args, **kwargs)
        slow["left"] = 0
        with transaction.atomic():
            time.sleep(2 * settings.PICOBOT.lease_seconds)
            return rig.real_commit(*args, **kwargs)

    rig.commit = commit


# --- channel layer -----------------------------------------------------------------------------


async def droppable_layer(rig: Rig) -> None:
    """The layer's ``send``/``group_send`` drop every message, silently, while ``rig.dropping``
    (what a full channel does to group messages, and a lost wake-up)."""
    layer = get_channel_layer()
    rig.dropping = False
    real_send, real_group_send = layer.send, layer.group_send

    async def send(channel: str, message: dict) -> None:
        if not rig.dropping:
            await real_send(channel, message)

    async def group_send(group: str, message: dict) -> None:
        if not rig.dropping:
            await real_group_send(group, message)

    rig.monkeypatch.setattr(layer, "send", send)
    rig.monkeypatch.setattr(layer, "group_send", group_send)


def start_dropping(rig: Rig) -> None:
    rig.dropping = True


def stop_dropping(rig: Rig) -> None:
    rig.dropping = False


def expiring_layer(rig: Rig) -> None:
    """From now on every layer message is already past the layer's ``expiry`` when read."""
    get_channel_layer().expiry = -1


def fresh_layer(rig: Rig) -> None:
    get_channel_layer().expiry = 60


# --- sinks -------------------------------------------------------------------------------------


class FaultySink(CliChatSink):
    """The real cli_chat sink whose ``update`` / ``finish`` raise when told to."""

    def __init__(self, inner: CliChatSink, *, update_fails: bool, finish_fails: bool) -> None:
        super().__init__(inner.channel_layer, inner.group, min_interval=inner.live_policy.min_interval)
        self.update_fails = update_fails
        self.finish_fails = finish_fails

    async def update(self, snapshot: Any, payload_json: str) -> None:
        if self.update_fails:
            raise RuntimeError("sink update refused (fault injection)")
        await super().update(snapshot, payload_json)

    async def finish(self, snapshot: Any, payload_json: str) -> None:
        if self.finish_fails:
            raise RuntimeError("sink finish refused (fault injection)")
        await super().finish(snapshot, payload_json)


def sink_factory(*, open_fails: bool = False, update_fails: bool = False, finish_fails: bool = False) -> Any:
    """A ``sink_factory`` whose first turn's sink fails as told (later turns get the real sink)."""
    opened: list[str] = []

    async def open_sink(start: Any) -> CliChatSink:
        opened.append(start.turn_id)
        first = len(opened) == 1
        if open_fails and first:
            raise RuntimeError("sink open refused (fault injection)")
        sink = await open_cli_chat_sink(start)
        return FaultySink(sink, update_fails=update_fails and first, finish_fails=finish_fails and first)

    return open_sink


PLANS: dict[str, Any] = {
    "provider-stall": lambda: FaultPlan(
        after_tool=lambda a: SSEResponse(pieces=partial_pieces(), stall_after=3)
    ),
    "provider-reset": lambda: FaultPlan(
        after_tool=lambda a: SSEResponse(pieces=partial_pieces(), abort=True)
    ),
    "provider-5xx": lambda: FaultPlan(after_tool=retried_after(server_error())),
    "provider-malformed-json": lambda: FaultPlan(after_tool=malformed_answer),
    "provider-huge-chunks": lambda: FaultPlan(after_tool=huge_answer),
    "provider-slow-drip": lambda: FaultPlan(after_tool=dripping_answer),
    "db-locked": lambda: FaultPlan(setup=fail_first_commits(2, "database is locked")),
    "db-write-failure": lambda: FaultPlan(setup=failing_turn_starts),
    "db-commit-failure": lambda: FaultPlan(setup=fail_first_turn_commit),
    "db-slow-commit": lambda: FaultPlan(setup=slow_first_commit),
    "layer-drop": lambda: FaultPlan(setup=droppable_layer, enter=start_dropping, leave=stop_dropping),
    "layer-expire": lambda: FaultPlan(enter=expiring_layer, leave=fresh_layer),
    "sink-open-failure": lambda: FaultPlan(worker_options={"sink_factory": sink_factory(open_fails=True)}),
    "sink-update-failure": lambda: FaultPlan(
        worker_options={"sink_factory": sink_factory(update_fails=True)}
    ),
    "sink-finish-failure": lambda: FaultPlan(
        worker_options={"sink_factory": sink_factory(finish_fails=True)}
    ),
    "sink-slow-client": lambda: FaultPlan(read_delay=0.02, answer_words=200, answer_delay=0.002),
    "sink-non-reading-client": lambda: FaultPlan(lurker=True, answer_words=400, answer_delay=0.002),
}
"""Fault id → a fresh plan (plans hold per-run state)."""
