"""Fallback through the real worker: a preset that cannot answer hands the turn to its fallback
(issue 17, Must show 2).

Presets ``A`` (with ``fallbacks = ["B"]``) and ``B`` are two local servers of a real
``PICOBOT_CONFIG`` file. The chat sees a notice naming both presets, the turn answers from B and
the inbox row records B; errors that do not mean "try elsewhere" fail the turn as before.
"""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from prometheus_client import REGISTRY

from conversations.models import InboxMessage
from providers.metering import ProviderCall, add_observer, remove_observer
from providers.testing import LocalSSEServer, SSEResponse, openai_events, sse_body
from tests.conversations.conftest import make_token
from tests.conversations.presets.conftest import preset_table
from tests.providers.test_fallback_http import blackhole

pytestmark = [pytest.mark.django_db(transaction=True)]

JSON = {"content-type": "application/json"}


def fallbacks_counted(kind: str) -> float:
    labels = {"from_preset": "A", "to_preset": "B", "kind": kind}
    return REGISTRY.get_sample_value("picobot_fallbacks_total", labels) or 0.0


def answers(text: str) -> SSEResponse:
    return SSEResponse(pieces=[sse_body(openai_events(text))])


def refusal(status: int, message: str, code: str = "", headers: dict[str, str] | None = None) -> SSEResponse:
    body = json.dumps({"error": {"message": message, "type": code or "error", "code": code or None}})
    return SSEResponse(status, {**JSON, **(headers or {})}, [body.encode()], chunked=False)


@database_sync_to_async
def inbox_model(client_msg_id: str) -> str:
    return InboxMessage.objects.get(client_msg_id=client_msg_id).model


async def one_turn(presets, connect, start_worker, a_url: str, b_url: str) -> tuple[object, dict]:
    presets(preset_table("A", a_url, fallbacks=["B"]) + preset_table("B", b_url))
    await start_worker(None)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "question", "client_msg_id": "q1"})
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    return client, final["turn"]


def answer_text(turn: dict) -> str:
    return "".join(block.get("text", "") for block in turn["blocks"] if block["type"] == "assistant")


@pytest.mark.parametrize(
    ("refused", "notice"),
    [
        (
            refusal(429, "Rate limit reached", "rate_limit_exceeded", {"retry-after": "30"}),
            "Model A is rate-limited; answering with B.",
        ),
        (refusal(529, "Overloaded", "overloaded_error"), "Model A is overloaded; answering with B."),
        (refusal(503, "Service Unavailable"), "Model A is overloaded; answering with B."),
    ],
    ids=["429-retry-after", "529", "503"],
)
async def test_a_refusing_first_preset_hands_the_turn_to_its_fallback(
    presets, connect, start_worker, refused, notice
):
    calls: list[ProviderCall] = []
    add_observer(calls.append)
    kind = {429: "rate_limited", 529: "overloaded", 503: "overloaded"}[refused.status]
    counted = fallbacks_counted(kind)
    try:
        async with LocalSSEServer([refused]) as a, LocalSSEServer([answers("answer from B")]) as b:
            client, turn = await one_turn(presets, connect, start_worker, a.base_url, b.base_url)
    finally:
        remove_observer(calls.append)
    assert turn["status"] == "completed" and answer_text(turn) == "answer from B"
    assert len(a.recorded) == 1 and len(b.recorded) == 1  # A at once, not retried
    # Every attempt is recorded under its own preset (usage rows, metrics).
    assert [(c.preset, c.outcome, c.model) for c in calls] == [
        ("A", "error", "model-A"),
        ("B", "ok", "model-B"),
    ]
    shown = [f for f in client.of_type("notification") if f.get("level") == "warning"]
    assert [f["content"] for f in shown] == [notice]
    assert await inbox_model("q1") == "B"
    assert fallbacks_counted(kind) == counted + 1  # picobot_fallbacks_total


async def test_a_connect_timeout_on_the_first_preset_hands_the_turn_to_its_fallback(
    presets, connect, start_worker, settings
):
    settings.PICOBOT = settings.PICOBOT.replace(llm_connect_timeout=0.3)
    with blackhole() as dead_url:
        async with LocalSSEServer([answers("answer from B")]) as b:
            client, turn = await one_turn(presets, connect, start_worker, dead_url, b.base_url)
    assert turn["status"] == "completed" and answer_text(turn) == "answer from B"
    assert "Model A did not answer in time; answering with B." in [
        f["content"] for f in client.of_type("notification")
    ]
    assert await inbox_model("q1") == "B"


@pytest.mark.parametrize(
    "refused",
    [
        refusal(401, "Incorrect API key provided", "invalid_api_key"),
        refusal(400, "This model's maximum context length is 8192 tokens", "context_length_exceeded"),
    ],
    ids=["401", "context-overflow"],
)
async def test_an_auth_error_or_a_context_overflow_fails_the_turn_without_a_fallback(
    presets, connect, start_worker, refused
):
    async with LocalSSEServer([refused], repeat_last=True) as a, LocalSSEServer([answers("never")]) as b:
        client, turn = await one_turn(presets, connect, start_worker, a.base_url, b.base_url)
        assert turn["status"] == "failed" and not b.recorded
    assert not [f for f in client.of_type("notification") if "answering with" in f.get("content", "")]
    assert await inbox_model("q1") == "A"


async def test_output_already_shown_is_kept_and_never_followed_by_a_fallback(presets, connect, start_worker):
    cut = sse_body(openai_events("partial answer", done=False)[:2])
    async with (
        LocalSSEServer([SSEResponse(pieces=[cut], abort=True)]) as a,
        LocalSSEServer([answers("never")]) as b,
    ):
        client, turn = await one_turn(presets, connect, start_worker, a.base_url, b.base_url)
        assert not b.recorded
    assert turn["status"] == "failed" and answer_text(turn).startswith("partial")
    assert await inbox_model("q1") == "A"


async def test_an_exhausted_chain_fails_once_naming_the_presets_tried(presets, connect, start_worker):
    async with (
        LocalSSEServer([refusal(529, "Overloaded", "overloaded_error")]) as a,
        LocalSSEServer([refusal(503, "down for maintenance")], repeat_last=True) as b,
    ):
        client, turn = await one_turn(presets, connect, start_worker, a.base_url, b.base_url)
    assert turn["status"] == "failed"
    assert "no model preset could answer (tried A (overloaded), B (overloaded))" in turn["error"]
    assert len([f for f in client.of_type("turn_updated") if f["turn"]["status"] == "failed"]) == 1


async def test_a_last_preset_waiting_out_a_rate_limit_tells_the_chat_when_it_tries_again(
    presets, settings, connect, start_worker
):
    settings.PICOBOT = settings.PICOBOT.replace(llm_max_retries=2)
    limited = refusal(429, "Rate limit reached", "rate_limit_exceeded", {"retry-after": "2"})
    async with LocalSSEServer([limited, answers("after the wait")]) as a:
        presets(preset_table("A", a.base_url))  # no fallback: the bounded retry honours Retry-After
        await start_worker(None)
        client = await connect(await make_token())
        await client.until("ready")
        await client.send({"type": "message", "content": "question", "client_msg_id": "q1"})
        notice = await client.until("notification", lambda f: f.get("level") == "warning")
        final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert notice["content"] == "The model is rate-limited; trying again in 2 s (retry 1 of 2)."
    assert final["turn"]["status"] == "completed" and answer_text(final["turn"]) == "after the wait"
    assert len(a.requests) == 2
