"""Per-user daily budgets (issue 17): past the day's token or cost budget a new message is refused
before it is stored (WebSocket ``error`` ``budget_exceeded``, REST 429), a turn queued before the
budget ran out fails at its start without calling the model, and the budget resets at UTC midnight."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.models import InboxMessage, Message, UsageRecord
from conversations.usage.budget import check_budget, refusal
from providers.testing import ScriptedProvider
from tests.conversations.api.conftest import ApiClient
from tests.conversations.conftest import make_token

NOW = datetime(2026, 3, 14, 21, 30, tzinfo=UTC)


# --- the rule (pure) ------------------------------------------------------------------------------


def test_no_budget_set_refuses_nothing() -> None:
    assert refusal(10**9, Decimal(10**6), max_tokens=0, max_cost=Decimal(0), now=NOW) is None


def test_under_both_budgets_nothing_is_refused() -> None:
    assert refusal(999, Decimal("0.49"), max_tokens=1000, max_cost=Decimal("0.5"), now=NOW) is None


def test_reaching_the_token_budget_refuses_and_says_which_and_when_it_resets() -> None:
    refused = refusal(1000, Decimal(0), max_tokens=1000, max_cost=Decimal(0), now=NOW)
    assert refused is not None
    assert (refused.limit, refused.used, refused.budget) == ("tokens", 1000, 1000)
    assert refused.resets_at == datetime(2026, 3, 15, tzinfo=UTC)
    assert refused.message == (
        "Your daily token budget (1,000 tokens; 1,000 used today) is used up; "
        "it resets at 00:00 UTC (in 2 h 30 min)."
    )


def test_reaching_the_cost_budget_refuses_and_names_the_cost() -> None:
    refused = refusal(5, Decimal("0.5000012"), max_tokens=1000, max_cost=Decimal("0.5"), now=NOW)
    assert refused is not None and refused.limit == "cost"
    assert "daily cost budget (0.5; 0.5 used today)" in refused.message


# --- the gateway ----------------------------------------------------------------------------------


@database_sync_to_async
def spend(username: str, tokens: int, cost: str = "0", day: datetime | None = None) -> object:
    """One usage row of ``tokens`` (input) for ``username`` on ``day`` (today, UTC)."""
    user, _ = get_or_create_user(username)
    UsageRecord.objects.create(
        user=user,
        username=username,
        day=(day or datetime.now(UTC)).date(),
        preset="default",
        input_tokens=tokens,
        cost=Decimal(cost),
    )
    return user


@pytest.mark.django_db(transaction=True)
async def test_past_the_token_budget_a_websocket_message_is_refused_and_not_stored(connect, settings):
    settings.PICOBOT = settings.PICOBOT.replace(user_daily_tokens=1000)
    token = await make_token("alice")
    await spend("alice", 600)
    await spend("alice", 400)
    await spend("alice", 10**6, day=datetime(2020, 1, 1, tzinfo=UTC))  # another day: not counted
    client = await connect(token)
    await client.until("ready")
    await client.send({"type": "message", "content": "one more", "client_msg_id": "b-1"})
    error = await client.until("error")
    assert (error["code"], error["client_msg_id"]) == ("budget_exceeded", "b-1")
    assert "daily token budget (1,000 tokens; 1,000 used today)" in error["message"]
    assert "00:00 UTC" in error["message"] and "not accepted" in error["message"]
    assert 0 < error["retry_after"] <= 86_400
    assert not await database_sync_to_async(InboxMessage.objects.exists)()

    bob = await connect(await make_token("bob"))  # a budget is per user
    await bob.until("ready")
    await bob.send({"type": "message", "content": "hello", "client_msg_id": "b-2"})
    assert (await bob.until("ack"))["client_msg_id"] == "b-2"


@pytest.mark.django_db(transaction=True)
async def test_past_the_cost_budget_a_rest_message_answers_429_with_the_reset(settings):
    settings.PICOBOT = settings.PICOBOT.replace(user_daily_cost=0.02)
    token = await make_token("alice")
    await spend("alice", 10, cost="0.015")
    api = ApiClient(token)
    session = (await api.post("/dialogs", json={})).json()["session_id"]
    assert (await api.post(f"/dialogs/{session}/messages", json={"content": "under"})).status_code == 202
    await spend("alice", 10, cost="0.005")
    answer = await api.post(f"/dialogs/{session}/messages", json={"content": "over"})
    assert answer.status_code == 429
    assert answer.json()["code"] == "budget_exceeded"
    assert "daily cost budget (0.02; 0.02 used today)" in answer.json()["message"]
    assert 0 < int(answer.headers["Retry-After"]) <= 86_400
    contents = await database_sync_to_async(
        lambda: list(InboxMessage.objects.values_list("content", flat=True))
    )()
    assert contents == ["under"]


@pytest.mark.django_db(transaction=True)
async def test_a_message_queued_before_the_budget_ran_out_fails_at_its_turn_without_a_model_call(
    connect, start_worker, settings
):
    token = await make_token("alice")
    client = await connect(token)
    await client.until("ready")
    user = await database_sync_to_async(lambda: get_or_create_user("alice")[0])()
    await database_sync_to_async(storage.accept_message)(user, "cli_chat", str(user.pk), "queued early")
    settings.PICOBOT = settings.PICOBOT.replace(user_daily_tokens=100)
    await spend("alice", 150)

    provider = ScriptedProvider([])  # any call would raise: none may happen
    await start_worker(provider)
    final = await client.until("turn_updated", lambda f: f["turn"]["status"] != "running")
    assert final["turn"]["status"] == "failed"
    assert "daily token budget (100 tokens; 150 used today)" in final["turn"]["error"]
    assert "stays in the history" in final["turn"]["error"]
    assert provider.requests == []
    history = await database_sync_to_async(
        lambda: list(Message.objects.order_by("seq").values_list("role", "content"))
    )()
    assert history == [("user", "queued early")]


@pytest.mark.django_db(transaction=True)
def test_check_budget_counts_only_the_users_own_rows_of_the_utc_day(settings) -> None:
    settings.PICOBOT = settings.PICOBOT.replace(user_daily_tokens=100)
    alice, _ = get_or_create_user("alice")
    bob, _ = get_or_create_user("bob")
    today = datetime.now(UTC)
    UsageRecord.objects.create(user=bob, day=today.date(), input_tokens=500)
    UsageRecord.objects.create(user=alice, day=today.date(), input_tokens=60, output_tokens=39)
    assert check_budget(alice.pk, today) is None
    UsageRecord.objects.create(user=alice, day=today.date(), output_tokens=1)
    assert check_budget(alice.pk, today) is not None
    assert check_budget(None, today) is None
