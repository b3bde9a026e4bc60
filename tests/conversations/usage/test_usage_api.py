"""``GET /api/usage`` (issue 17 "Public surface"): own rows for a user, everyone's for staff, by
dialog, user or day, within optional UTC days; a bad ``group_by`` or range is a clear 422."""

from __future__ import annotations

from decimal import Decimal

import pytest
from channels.db import database_sync_to_async

from conversations.auth import create_token, get_or_create_user
from conversations.models import UsageRecord
from tests.conversations.api.conftest import ApiClient

pytestmark = [pytest.mark.django_db(transaction=True)]


@database_sync_to_async
def seed() -> tuple[str, str]:
    """Rows of alice (two dialogs, two days) and bob; returns (alice's token, staff token)."""
    alice, _ = get_or_create_user("alice")
    bob, _ = get_or_create_user("bob")
    root, _ = get_or_create_user("root")
    root.is_staff = True
    root.save()
    rows = [
        (alice, "cli_chat:1:a", "2026-03-01", 100, 10, 40, "0.001"),
        (alice, "cli_chat:1:a", "2026-03-02", 200, 20, 0, "0.002"),
        (alice, "cli_chat:1:b", "2026-03-02", 300, 30, 100, "0.003"),
        (bob, "cli_chat:2:c", "2026-03-02", 1000, 100, 0, "0.01"),
    ]
    for user, dialog, day, inp, out, cached, cost in rows:
        UsageRecord.objects.create(
            user=user,
            username=user.username,
            dialog_id=dialog,
            day=day,
            input_tokens=inp,
            output_tokens=out,
            cached_tokens=cached,
            cost=Decimal(cost),
        )
    return create_token(alice), create_token(root)


def item(key: str, calls: int, inp: int, out: int, cached: int, cost: float) -> dict:
    return {
        "key": key,
        "calls": calls,
        "input_tokens": inp,
        "output_tokens": out,
        "cached_tokens": cached,
        "cost": cost,
    }


async def test_a_user_sees_only_their_own_usage_by_dialog_user_and_day():
    alice_token, _ = await seed()
    alice = ApiClient(alice_token)
    by_dialog = (await alice.get("/usage?group_by=dialog")).json()
    assert by_dialog == {
        "group_by": "dialog",
        "items": [item("cli_chat:1:a", 2, 300, 30, 40, 0.003), item("cli_chat:1:b", 1, 300, 30, 100, 0.003)],
    }
    assert (await alice.get("/usage?group_by=user")).json()["items"] == [
        item("alice", 3, 600, 60, 140, 0.006)
    ]
    assert (await alice.get("/usage?group_by=day")).json()["items"] == [
        item("2026-03-01", 1, 100, 10, 40, 0.001),
        item("2026-03-02", 2, 500, 50, 100, 0.005),
    ]


async def test_staff_see_everyones_usage_and_days_narrow_it():
    _, root_token = await seed()
    root = ApiClient(root_token)
    assert [i["key"] for i in (await root.get("/usage?group_by=user")).json()["items"]] == ["alice", "bob"]
    narrowed = (await root.get("/usage?group_by=user&since=2026-03-02&until=2026-03-02")).json()["items"]
    assert narrowed == [item("alice", 2, 500, 50, 100, 0.005), item("bob", 1, 1000, 100, 0, 0.01)]
    assert (await root.get("/usage?group_by=day&until=2026-02-28")).json()["items"] == []


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("group_by=model", "group_by"),
        ("", "group_by"),
        ("group_by=day&since=yesterday", "since"),
        ("group_by=day&since=2026-03-02&until=2026-03-01", "since (2026-03-02) is after until (2026-03-01)"),
    ],
)
async def test_a_bad_group_by_or_day_range_is_a_422_that_says_what_is_wrong(query, words):
    alice_token, _ = await seed()
    answer = await ApiClient(alice_token).get(f"/usage?{query}")
    assert answer.status_code == 422
    assert answer.json()["code"] == "validation_error"
    assert words in str(answer.json())


async def test_usage_needs_authentication():
    assert (await ApiClient(None).get("/usage?group_by=day")).status_code == 401
