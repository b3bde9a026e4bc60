"""Usage rows end to end (issue 17, Must show 3): a turn with a tool call, a title, a turn whose
provider reported no usage, a ``/compact`` and a failed call each leave one row with the provider's
numbers (or an estimate, marked), cost = tokens × the preset's prices exactly, and the REST API,
the admin and the database agree on the sums."""

from __future__ import annotations

from decimal import Decimal

import pytest
from channels.db import database_sync_to_async
from django.db.models import Sum
from django.test import Client

from conversations.auth import get_or_create_user
from conversations.models import UsageRecord
from conversations.tools import Tool, ToolRegistry
from conversations.usage.writer import usage_writer
from providers.chunks import UsageChunk
from providers.errors import OverloadedError
from providers.messages import Usage
from providers.testing import ScriptedProvider, script_text, script_tool_call
from tests.conversations.api.conftest import ApiClient
from tests.conversations.conftest import make_token
from tests.conversations.context.test_turn_input import seed_chat

pytestmark = [pytest.mark.django_db(transaction=True)]

PRICES = {"input": Decimal("2.5"), "output": Decimal(10), "cached": Decimal("1.25")}  # the "priced" preset


def with_usage(chunks: list, usage: Usage | None) -> list:
    """``chunks`` with their usage replaced by ``usage`` (None: the provider reports none)."""
    out = [c for c in chunks if not isinstance(c, UsageChunk)]
    if usage is not None:
        out.insert(-1, UsageChunk(usage))
    return out


def expected_cost(input_tokens: int, output_tokens: int, cached: int) -> Decimal:
    """Issue 17's rule, written out."""
    return (
        (input_tokens - cached) * PRICES["input"]
        + cached * PRICES["cached"]
        + output_tokens * PRICES["output"]
    ) / Decimal(1_000_000)


async def lookup(arguments: dict) -> str:
    return f"{arguments.get('q')}: temples and maples"


TOOLS = ToolRegistry(
    [Tool("lookup", "looks a place up", {"type": "object", "properties": {"q": {"type": "string"}}}, lookup)]
)


@database_sync_to_async
def usage_rows() -> list[UsageRecord]:
    return list(UsageRecord.objects.order_by("id"))


@database_sync_to_async
def admin_totals(username: str, query: str = "") -> dict:
    staff, _ = get_or_create_user(username)
    staff.is_staff = staff.is_superuser = True
    staff.save()
    client = Client()
    client.force_login(staff)
    response = client.get(f"/admin/conversations/usagerecord/{query}")
    assert response.status_code == 200
    assert b'id="usage-totals"' in response.content
    return response.context_data["usage_totals"]


async def test_a_turn_with_a_tool_a_title_a_compaction_and_a_failure_each_leave_one_priced_row(
    connect, start_worker, settings, priced_presets
):
    settings.PICOBOT = settings.PICOBOT.replace(
        auto_title_after=0, auto_title_on_first_message=True, compact_keep_messages=1
    )
    provider = ScriptedProvider(
        [
            with_usage(script_tool_call("call_1", "lookup", {"q": "kyoto"}), Usage(1200, 40, 1000)),
            with_usage(script_text("Kyoto is lovely in autumn."), Usage(1300, 60, 1024, 20)),
            with_usage(script_text("Autumn in Kyoto"), Usage(300, 8)),  # the title
            with_usage(script_text("Book the ryokan early."), None),  # no usage: estimated
            with_usage(script_text("SUMMARY: a trip to Kyoto."), Usage(900, 120, 512)),  # /compact
            OverloadedError("upstream overloaded", http_status=503),  # a failed call
        ]
    )
    await start_worker(provider, tools=TOOLS)
    token = await make_token("alice")
    client = await connect(token)
    session = (await client.until("ready"))["active_session_id"]

    await client.send({"type": "message", "content": "Tell me about Kyoto", "client_msg_id": "u-1"})
    await client.until("turn_committed")
    await client.until("session_changed")  # the title, committed
    await client.send({"type": "message", "content": "Where to stay?", "client_msg_id": "u-2"})
    await client.until("turn_committed", lambda f: f["messages"][0]["content"] == "Where to stay?")
    await client.send({"type": "message", "content": "/compact", "client_msg_id": "c-1"})
    await client.until("notification", lambda f: f["content"].startswith("Compacted"))
    await client.send({"type": "message", "content": "And food?", "client_msg_id": "u-3"})
    failed = await client.until("turn_updated", lambda f: f["turn"]["status"] == "failed")
    await usage_writer.flush()

    rows = await usage_rows()
    assert [(r.kind, r.outcome, r.estimated) for r in rows] == [
        ("turn", "ok", False),
        ("turn", "ok", False),
        ("title", "ok", False),
        ("turn", "ok", True),
        ("compaction", "ok", False),
        ("turn", "error", False),
    ]
    tool_turn, answer, title, estimated, compaction, error = rows
    assert (tool_turn.input_tokens, tool_turn.output_tokens, tool_turn.cached_tokens) == (1200, 40, 1000)
    assert (answer.input_tokens, answer.output_tokens, answer.cached_tokens, answer.reasoning_tokens) == (
        1300,
        60,
        1024,
        20,
    )
    assert (title.input_tokens, title.output_tokens, title.turn_id) == (300, 8, "")
    assert tool_turn.turn_id == answer.turn_id != "" and estimated.turn_id not in ("", tool_turn.turn_id)
    assert error.turn_id == failed["turn"]["id"]
    assert estimated.input_tokens > 0 and estimated.output_tokens > 0, "estimated from request and answer"
    # Refused before any output, without usage: not billed by vendors, so nothing used.
    assert (error.input_tokens, error.output_tokens, error.cost) == (0, 0, 0)
    assert (compaction.input_tokens, compaction.output_tokens, compaction.cached_tokens) == (900, 120, 512)
    assert compaction.turn_id == ""  # /compact runs outside any turn
    user = await database_sync_to_async(lambda: get_or_create_user("alice")[0])()
    for row in rows:
        assert (row.preset, row.model, row.dialog_id) == ("priced", "scripted-model", session)
        assert (row.user_id, row.username, row.channel) == (user.pk, "alice", "cli_chat")
        assert row.cost == expected_cost(row.input_tokens, row.output_tokens, row.cached_tokens)
        assert row.latency_ms >= 0 and row.day.isoformat() == row.day.isoformat()[:10]
    assert error.ttft_ms is None and tool_turn.ttft_ms is not None

    # REST, the admin and the database agree.
    db = await database_sync_to_async(
        lambda: UsageRecord.objects.aggregate(
            i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cached_tokens"), cost=Sum("cost")
        )
    )()
    api = ApiClient(token)
    for group_by, key in (("dialog", session), ("user", "alice"), ("day", rows[0].day.isoformat())):
        answer_ = await api.get(f"/usage?group_by={group_by}")
        assert answer_.status_code == 200
        assert answer_.json() == {
            "group_by": group_by,
            "items": [
                {
                    "key": key,
                    "calls": 6,
                    "input_tokens": db["i"],
                    "output_tokens": db["o"],
                    "cached_tokens": db["c"],
                    "cost": float(db["cost"]),
                }
            ],
        }
    totals = await admin_totals("root")
    assert (totals["calls"], totals["input_tokens"], totals["output_tokens"], totals["cached_tokens"]) == (
        6,
        db["i"],
        db["o"],
        db["c"],
    )
    assert totals["cost"] == float(db["cost"])
    titles = await admin_totals("root", "?kind__exact=title")
    assert (titles["calls"], titles["input_tokens"], titles["output_tokens"]) == (1, 300, 8)

    # /info shows the dialog's sums.
    await client.send({"type": "message", "content": "/info", "client_msg_id": "i-1"})
    notice = await client.until("notification", lambda f: "info" in f)
    assert notice["info"]["usage"] == {
        "calls": 6,
        "input_tokens": db["i"],
        "output_tokens": db["o"],
        "cached_tokens": db["c"],
        "cost": float(db["cost"]),
    }
    line = f"tokens used: {db['i']:,} in, {db['o']:,} out ({db['c']:,} cached) in 6 calls · cost {float(db['cost']):.4f}"
    assert line in notice["content"]


async def test_an_automatic_compaction_inside_a_turn_is_a_compaction_row_under_the_turns_id(
    connect, start_worker, settings, priced_presets
):
    settings.PICOBOT = settings.PICOBOT.replace(auto_title_after=0, compact_threshold=0.8)
    provider = ScriptedProvider(
        [
            with_usage(script_text("SUMMARY: sixty topics."), Usage(5000, 200)),  # the summary comes first
            with_usage(script_text("Topic sixty, then."), Usage(3000, 50, 2048)),
        ]
    )
    client = await connect(await make_token("alice"))
    session = (await client.until("ready"))["active_session_id"]
    await seed_chat(session, 60, 500)  # ≈ 16 000 estimated tokens: past 80 % of the 8 000 window
    await start_worker(provider)
    await client.send({"type": "message", "content": "What now?", "client_msg_id": "a-1"})
    committed = await client.until("turn_committed")
    await usage_writer.flush()

    rows = await usage_rows()
    assert [(r.kind, r.input_tokens, r.output_tokens, r.cached_tokens) for r in rows] == [
        ("compaction", 5000, 200, 0),
        ("turn", 3000, 50, 2048),
    ]
    assert rows[0].turn_id == rows[1].turn_id == committed["messages"][-1]["turn_id"] != ""
    assert {(r.username, r.channel, r.dialog_id, r.preset) for r in rows} == {
        ("alice", "cli_chat", session, "priced")
    }
    assert [r.cost for r in rows] == [expected_cost(5000, 200, 0), expected_cost(3000, 50, 2048)]
