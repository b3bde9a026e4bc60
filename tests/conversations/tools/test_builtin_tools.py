"""Built-in tools and tool-call semantics (DESIGN §6, §9).

- Through the worker: two calls of one response run concurrently, a call past its
  timeout and a call with invalid JSON arguments become error results, and the turn completes.
- ``memory_save`` / ``memory_search``: per owner, ranked, bounded (SQLite here; the PostgreSQL path
  runs when ``tests/services/test_storage_postgres.py`` runs this file there).
- ``plan_update`` / ``plan_get``: the dialog's plan, bounded.
- ``http_fetch``: refusals of local addresses and schemes, redirects re-checked,
  limits. The test network is loopback only (tests/conftest.py), so the "public" test server is a
  loopback one at 127.0.0.2 exempted by the policy's ``allow_address`` hook, and host names go
  through an injected resolver; 127.0.0.1 stays refused.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from channels.db import database_sync_to_async

from conversations.agent.tool_registry import Tool
from conversations.auth import get_or_create_user
from conversations.models import Dialog, MemoryItem, Message, Plan
from conversations.tools import ToolContext, ToolRegistry, default_registry
from conversations.tools.http_fetch import (
    FetchPolicy,
    FetchRefused,
    address_refusal,
    fetch,
    html_to_text,
    http_fetch_tool,
)
from conversations.tools.http_fetch import tool as http_fetch_module
from conversations.tools.memory import MAX_LIMIT, memory_tools, search_terms
from conversations.tools.plan import MAX_STEPS, STEP_MAX_CHARS, plan_tools, render_plan
from providers.blocks import ToolResultBlock
from providers.chunks import Done, ToolCallArgumentsDelta, ToolCallStart, UsageChunk
from providers.messages import Usage
from providers.testing import ScriptedProvider, script_text
from providers.types import ToolCall
from tests.conversations.conftest import make_token


def call(name: str, arguments: dict | str = "{}", call_id: str = "call_1") -> ToolCall:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=call_id, name=name, arguments_json=raw)


def calls_response(*calls: tuple[str, str, str]) -> list:
    """One model response calling several tools: ``(call_id, name, raw_arguments)`` each."""
    chunks: list = []
    for index, (call_id, name, raw) in enumerate(calls):
        chunks += [ToolCallStart(index, call_id, name), ToolCallArgumentsDelta(index, raw)]
    return [*chunks, UsageChunk(Usage(10, 5)), Done("tool_calls")]


# --- concurrency, timeout and invalid JSON through the worker -------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_concurrent_calls_a_timeout_and_invalid_json_become_results_and_the_turn_completes(
    connect, start_worker
):
    log: list[str] = []
    started = {"left": asyncio.Event(), "right": asyncio.Event()}
    never = asyncio.Event()

    def meeting(me: str, other: str):
        async def handler(arguments: dict) -> str:
            log.append(f"{me}:start")
            started[me].set()
            await started[other].wait()  # never returns if the calls ran one after the other
            log.append(f"{me}:end")
            return f"{me} done"

        return handler

    async def sleepy(arguments: dict) -> str:
        await never.wait()
        return "too late"

    empty = {"type": "object", "properties": {}}
    tools = ToolRegistry(
        [
            Tool("left", "left", empty, meeting("left", "right"), timeout=10),
            Tool("right", "right", empty, meeting("right", "left"), timeout=10),
            Tool("sleepy", "sleeps", empty, sleepy, timeout=0.2),
            Tool("strict", "strict", {"type": "object", "properties": {"x": {"type": "integer"}}}, sleepy),
        ]
    )
    provider = ScriptedProvider(
        [
            calls_response(
                ("call_l", "left", "{}"),
                ("call_r", "right", "{}"),
                ("call_s", "sleepy", "{}"),
                ("call_j", "strict", '{"x": '),
            ),
            script_text("All four handled."),
        ]
    )
    await start_worker(provider, tools=tools)
    client = await connect(await make_token())
    await client.until("ready")
    await client.send({"type": "message", "content": "go", "client_msg_id": "conc-1"})
    committed = await client.until("turn_committed", timeout=15)

    # Both calls started before either finished.
    assert set(log[:2]) == {"left:start", "right:start"}
    assert set(log[2:]) == {"left:end", "right:end"}
    rows = committed["messages"]
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "tool", "tool", "tool", "assistant"]
    results = {r["tool_call_id"]: (r["is_error"], r["content"]) for r in rows if r["role"] == "tool"}
    assert results["call_l"] == (False, "left done")
    assert results["call_r"] == (False, "right done")
    assert results["call_s"] == (True, "Error: sleepy timed out after 0.2 s")
    assert results["call_j"][0] is True
    assert results["call_j"][1].startswith("Error: invalid arguments JSON for strict:")
    assert (rows[-1]["content"], rows[-1]["completion_status"]) == ("All four handled.", "completed")
    final = [f for f in client.of_type("turn_updated") if f["turn"]["status"] == "completed"][-1]["turn"]
    assert [b["status"] for b in final["blocks"] if b["type"] == "tool"] == [
        "completed",
        "completed",
        "failed",
        "failed",
    ]
    # The model read the error results in its next request.
    second = provider.requests[1].messages
    sent = [b for m in second for b in m.content if isinstance(b, ToolResultBlock)]
    assert [(b.tool_call_id, b.is_error) for b in sent] == [
        ("call_l", False),
        ("call_r", False),
        ("call_s", True),
        ("call_j", True),
    ]
    stored = await database_sync_to_async(
        lambda: list(
            Message.objects.filter(role="tool").order_by("seq").values_list("tool_call_id", "is_error")
        )
    )()
    assert stored == [("call_l", False), ("call_r", False), ("call_s", True), ("call_j", True)]


# --- memory ---------------------------------------------------------------------------------------


@database_sync_to_async
def user_id(name: str) -> int:
    user, _ = get_or_create_user(name)
    return user.pk


@database_sync_to_async
def make_dialog(channel: str, chat_id: str, owner_id: int | None = None, dialog_id: str = "d1") -> str:
    pk = Dialog.unified_id(channel, chat_id, dialog_id)
    Dialog.objects.create(id=pk, channel=channel, chat_id=chat_id, dialog_id=dialog_id, owner_id=owner_id)
    return pk


def memory_registry(context: ToolContext):
    return ToolRegistry(memory_tools()).bind(context)


async def search(registry, query: str, **extra) -> list[dict]:
    outcome = await registry.run(call("memory_search", {"query": query, **extra}))
    assert outcome.is_error is False, outcome.content
    return json.loads(outcome.content)["results"]


async def save(registry, content: str, tags: list[str] | None = None) -> dict:
    arguments = {"content": content} | ({"tags": tags} if tags is not None else {})
    outcome = await registry.run(call("memory_save", arguments))
    assert outcome.is_error is False, outcome.content
    return json.loads(outcome.content)


@pytest.mark.django_db(transaction=True)
async def test_a_saved_memory_is_found_by_search():
    alice = memory_registry(ToolContext("cli_chat:1:d1", "cli_chat", "1", owner_id=await user_id("alice")))

    saved = await save(alice, "Alice prefers her coffee as a flat white, no sugar.", ["Food", "preference"])
    await save(alice, "Alice's cat is called Miso.")
    hits = await search(alice, "coffee")

    assert saved["status"] == "saved"
    assert [h["id"] for h in hits] == [saved["id"]]
    assert hits[0]["content"] == "Alice prefers her coffee as a flat white, no sugar."
    assert hits[0]["tags"] == ["food", "preference"]
    assert hits[0]["saved_at"].endswith("+00:00")
    assert [h["id"] for h in await search(alice, "preference")] == [saved["id"]]  # by tag


@pytest.mark.django_db(transaction=True)
async def test_chinese_memories_are_found_by_words_inside_a_sentence():
    alice = memory_registry(ToolContext("feishu:c1:d1", "feishu", "c1", owner_id=await user_id("alice")))
    await save(alice, "用户喜欢喝咖啡，不加糖")
    await save(alice, "用户的猫叫味噌")

    hits = await search(alice, "咖啡")
    phrase = await search(alice, "喜欢咖啡吗")

    assert [h["content"] for h in hits] == ["用户喜欢喝咖啡，不加糖"]
    assert phrase[0]["content"] == "用户喜欢喝咖啡，不加糖"
    assert search_terms("喜欢咖啡 Flat-White") == ["喜欢", "欢咖", "咖啡", "flat", "white"]


@pytest.mark.django_db(transaction=True)
async def test_a_memory_is_found_by_a_non_ascii_tag_on_every_database():
    """SQLite keeps JSON with non-ASCII escaped: tags 中文标签 / café were never found there."""
    alice = memory_registry(ToolContext("cli_chat:1:d1", "cli_chat", "1", owner_id=await user_id("alice")))
    saved = await save(alice, "Meets on Thursdays.", ["中文标签", "café"])
    await save(alice, "Unrelated note.", ["other"])

    for query in ("中文", "标签", "café", "CAFÉ"):
        assert [h["id"] for h in await search(alice, query)] == [saved["id"]], query


@pytest.mark.django_db(transaction=True)
async def test_another_owner_never_sees_the_memory():
    alice_id, bob_id = await user_id("alice"), await user_id("bob")
    alice = memory_registry(ToolContext("cli_chat:a:d1", "cli_chat", "a", owner_id=alice_id))
    bob = memory_registry(ToolContext("cli_chat:b:d1", "cli_chat", "b", owner_id=bob_id))
    await save(alice, "The vault code is in the blue notebook.")

    assert await search(bob, "vault code blue notebook") == []
    assert len(await search(alice, "vault code blue notebook")) == 1
    # Ownerless dialogs see only the ownerless items of their own chat.
    await make_dialog("feishu", "group-1")
    await make_dialog("feishu", "group-2")
    group_1 = memory_registry(ToolContext("feishu:group-1:d1", "feishu", "group-1"))
    group_2 = memory_registry(ToolContext("feishu:group-2:d1", "feishu", "group-2"))
    await save(group_1, "The group meets on the vault floor.")
    assert [h["content"] for h in await search(group_1, "vault")] == ["The group meets on the vault floor."]
    assert await search(group_2, "vault") == []
    rows = await database_sync_to_async(lambda: list(MemoryItem.objects.values_list("owner_id", "chat_id")))()
    assert sorted(rows, key=str) == sorted([(alice_id, "a"), (None, "group-1")], key=str)


@pytest.mark.django_db(transaction=True)
async def test_the_owner_comes_from_the_dialog_when_the_context_has_none():
    carol_id = await user_id("carol")
    dialog_id = await make_dialog("cli_chat", str(carol_id), owner_id=carol_id)
    carol = memory_registry(ToolContext(dialog_id, "cli_chat", str(carol_id)))
    await save(carol, "Carol runs marathons.")

    owners = await database_sync_to_async(
        lambda: list(MemoryItem.objects.values_list("owner_id", flat=True))
    )()
    assert owners == [carol_id]
    explicit = memory_registry(ToolContext("elsewhere:x:y", owner_id=carol_id))
    assert [h["content"] for h in await search(explicit, "marathons")] == ["Carol runs marathons."]


@pytest.mark.django_db(transaction=True)
async def test_search_ranks_better_matches_first_and_is_bounded():
    alice = memory_registry(ToolContext("cli_chat:1:d1", owner_id=await user_id("alice")))
    await save(alice, "Trip to Lisbon in May.")
    both = await save(alice, "Lisbon trip: book the hotel near the river.")
    await save(alice, "Hotel loyalty number 12345.")
    for i in range(MAX_LIMIT + 5):
        await save(alice, f"Note {i} about the hotel.")

    hits = await search(alice, "Lisbon hotel")
    many = await search(alice, "hotel", limit=MAX_LIMIT)
    default = await search(alice, "hotel")

    assert hits[0]["id"] == both["id"]
    assert len(many) == MAX_LIMIT and len(default) == 5
    too_many = await alice.run(call("memory_search", {"query": "hotel", "limit": MAX_LIMIT + 1}))
    assert too_many.is_error is True and "at $.limit" in too_many.content


@pytest.mark.django_db(transaction=True)
async def test_search_takes_the_full_text_path_of_the_running_database(monkeypatch):
    """PostgreSQL ranks with SearchVector/SearchQuery; SQLite takes the portable path."""
    from django.db import connection

    from conversations.tools import memory

    used: list[str] = []
    real = memory._postgres_candidates

    def spy(*args):
        used.append("postgresql")
        return real(*args)

    monkeypatch.setattr(memory, "_postgres_candidates", spy)
    alice = memory_registry(ToolContext("cli_chat:1:d1", owner_id=await user_id("alice")))
    await save(alice, "Quarterly report due Friday.")

    hits = await search(alice, "quarterly report")

    assert [h["content"] for h in hits] == ["Quarterly report due Friday."]
    assert used == (["postgresql"] if connection.vendor == "postgresql" else [])


@pytest.mark.django_db(transaction=True)
async def test_saving_the_same_note_again_updates_it_and_merges_tags():
    alice = memory_registry(ToolContext("cli_chat:1:d1", owner_id=await user_id("alice")))
    first = await save(alice, "Alice is allergic to peanuts.", ["health"])
    again = await save(alice, "  Alice is allergic to peanuts.  ", ["Food", "health"])

    assert (again["id"], again["status"]) == (first["id"], "updated")
    assert (await search(alice, "peanuts"))[0]["tags"] == ["health", "food"]


@pytest.mark.django_db(transaction=True)
async def test_memory_arguments_are_bounded_and_memory_needs_a_dialog():
    alice = memory_registry(ToolContext("cli_chat:1:d1", owner_id=await user_id("alice")))

    too_long = await alice.run(call("memory_save", {"content": "x" * 2001}))
    too_many_tags = await alice.run(call("memory_save", {"content": "x", "tags": [str(i) for i in range(9)]}))
    blank = await alice.run(call("memory_save", {"content": "   "}))
    no_words = await alice.run(call("memory_search", {"query": "?!"}))
    unbound = await ToolRegistry(memory_tools()).run(call("memory_save", {"content": "hi"}))

    assert too_long.is_error and "at $.content" in too_long.content
    assert too_many_tags.is_error and "at $.tags" in too_many_tags.content
    assert (blank.is_error, blank.content) == (True, "Error: content is empty")
    assert (no_words.is_error, no_words.content) == (True, "Error: the query has no searchable words")
    assert (unbound.is_error, unbound.content) == (
        True,
        "Error: memory_save is not available here (it needs a dialog)",
    )
    assert await database_sync_to_async(MemoryItem.objects.count)() == 0


@pytest.mark.django_db(transaction=True)
async def test_nul_characters_never_reach_the_database_from_memory_tools():
    """PostgreSQL refuses NUL in text (this file runs there too: tests/services): a model's
    ``\\x00`` must not take the crash path; it is stored as U+FFFD, like message rows."""
    alice = memory_registry(ToolContext("cli_chat:1:d1", "cli_chat", "1", owner_id=await user_id("alice")))

    saved = await save(alice, "likes\x00 green tea", ["drink\x00s"])
    again = await save(alice, "likes\x00 green tea")
    hits = await search(alice, "green\x00 tea")
    nul_only = await alice.run(call("memory_search", {"query": "\x00"}))

    assert saved["status"] == "saved" and again == {"id": saved["id"], "status": "updated"}
    item = await database_sync_to_async(MemoryItem.objects.get)()
    assert (item.content, item.tags) == ("likes\ufffd green tea", ["drink\ufffds"])
    assert [h["id"] for h in hits] == [saved["id"]]
    assert (nul_only.is_error, nul_only.content) == (True, "Error: the query has no searchable words")


# --- plan -----------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_plan_update_then_get_returns_the_plan_of_this_dialog_only():
    first = await make_dialog("cli_chat", "1", dialog_id="d1")
    second = await make_dialog("cli_chat", "1", dialog_id="d2")
    plans = ToolRegistry(plan_tools())
    steps = [
        {"text": "Find flights", "status": "done"},
        {"text": "Book   the hotel", "status": "in_progress"},
        {"text": "Pack", "status": "pending"},
    ]

    updated = await plans.run(
        call("plan_update", {"steps": steps, "note": "Budget 800 EUR"}), context=ToolContext(first)
    )
    got = await plans.run(call("plan_get"), context=ToolContext(first))
    other = await plans.run(call("plan_get"), context=ToolContext(second))

    assert updated.is_error is False and json.loads(updated.content) == json.loads(got.content)
    plan = json.loads(got.content)
    assert plan["steps"] == [
        {"text": "Find flights", "status": "done"},
        {"text": "Book the hotel", "status": "in_progress"},
        {"text": "Pack", "status": "pending"},
    ]
    assert plan["note"] == "Budget 800 EUR"
    assert plan["counts"] == {"pending": 1, "in_progress": 1, "done": 1}
    assert json.loads(other.content) == {"steps": [], "note": "", "message": "no active plan"}
    assert render_plan(plan) == "[x] Find flights\n[>] Book the hotel\n[ ] Pack\nNote: Budget 800 EUR"
    # An update replaces the plan; an empty list clears it.
    await plans.run(
        call("plan_update", {"steps": [{"text": "Pack", "status": "done"}]}), context=ToolContext(first)
    )
    assert json.loads((await plans.run(call("plan_get"), context=ToolContext(first))).content)["steps"] == [
        {"text": "Pack", "status": "done"}
    ]
    await plans.run(call("plan_update", {"steps": []}), context=ToolContext(first))
    assert (
        json.loads((await plans.run(call("plan_get"), context=ToolContext(first))).content)["message"]
        == "no active plan"
    )
    assert await database_sync_to_async(Plan.objects.count)() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({"steps": [{"text": f"s{i}", "status": "pending"} for i in range(MAX_STEPS + 1)]}, "at $.steps:"),
        ({"steps": [{"text": "x" * (STEP_MAX_CHARS + 1), "status": "pending"}]}, "at $.steps[0].text:"),
        (
            {"steps": [{"text": "a", "status": "done"}, {"text": "b", "status": "blocked"}]},
            "at $.steps[1].status:",
        ),
        ({"steps": [{"text": "a"}]}, "at $.steps[0]: 'status' is a required property"),
        ({"steps": [], "note": "n" * 1001}, "at $.note:"),
        ({"note": "no steps"}, "at $: 'steps' is a required property"),
    ],
)
async def test_plan_bounds_are_error_results_naming_the_failing_path(arguments, where):
    dialog = await make_dialog("cli_chat", "1")
    outcome = await ToolRegistry(plan_tools()).run(
        call("plan_update", arguments), context=ToolContext(dialog)
    )

    assert outcome.is_error is True
    assert outcome.content.startswith(f"Error: invalid arguments for plan_update: {where}")
    assert await database_sync_to_async(Plan.objects.count)() == 0


@pytest.mark.django_db(transaction=True)
async def test_nul_characters_never_reach_the_database_from_plan_update():
    dialog = await make_dialog("cli_chat", "1")
    outcome = await ToolRegistry(plan_tools()).run(
        call("plan_update", {"steps": [{"text": "pack\x00 bags", "status": "pending"}], "note": "n\x00"}),
        context=ToolContext(dialog),
    )

    assert outcome.is_error is False, outcome.content
    plan = await database_sync_to_async(Plan.objects.get)()
    assert plan.content == {"steps": [{"text": "pack\ufffd bags", "status": "pending"}], "note": "n\ufffd"}


@pytest.mark.django_db(transaction=True)
async def test_a_plan_for_a_dialog_that_is_gone_is_an_error_result():
    outcome = await ToolRegistry(plan_tools()).run(
        call("plan_update", {"steps": [{"text": "a", "status": "pending"}]}),
        context=ToolContext("cli_chat:1:gone"),
    )
    assert (outcome.is_error, outcome.content) == (True, "Error: this dialog no longer exists")


# --- http_fetch: refusals -------------------------------------------------------------------------


REFUSED_URLS = [
    ("http://127.0.0.1/", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("file:///etc/passwd", "only http and https"),
    ("http://[::1]/", "loopback"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://localhost/", "refused: localhost is loopback (localhost resolves to "),
    ("http://127.1.2.3:8080/admin", "loopback"),
    ("http://2130706433/", "loopback"),  # 127.0.0.1 as one decimal number
    ("http://[::ffff:127.0.0.1]/", "loopback (embedded in ::ffff:7f00:1)"),
    ("http://10.1.2.3/", "private"),
    ("http://192.168.0.1/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://100.64.0.1/", "shared address space"),
    ("http://169.254.1.1/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://[fc00::1]/", "private"),
    ("http://[fd00:ec2::254]/", "cloud metadata"),
    ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://[2002:7f00:1::]/", "loopback (embedded in 2002:7f00:1::)"),  # 6to4 of 127.0.0.1
    ("ftp://example.com/file", "only http and https"),
    ("gopher://example.com/", "only http and https"),
    ("https://user:secret@example.com/", "credentials"),
]


@pytest.mark.parametrize(("url", "reason"), REFUSED_URLS)
async def test_http_fetch_refuses_local_addresses_schemes_and_credentials(url, reason):
    outcome = await ToolRegistry([http_fetch_tool(FetchPolicy())]).run(call("http_fetch", {"url": url}))

    assert outcome.is_error is True
    assert outcome.content.startswith("Error: refused:")
    assert reason in outcome.content
    assert "secret" not in outcome.content


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/", "http://[fd00:ec2::254]/", "http://0.0.0.0/", "http://224.0.0.1/"]
)
async def test_allow_private_never_opens_metadata_unspecified_or_multicast(url):
    with pytest.raises(FetchRefused):
        await fetch(url, FetchPolicy(allow_private=True))


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("::ffff:10.0.0.1", "private (embedded in ::ffff:a00:1)"),
        ("240.0.0.1", "private"),  # reserved "class E"
        ("::127.0.0.1", "not a public address"),  # deprecated IPv4-compatible form
        ("64:ff9b::10.0.0.1", "private (embedded in 64:ff9b::a00:1)"),  # NAT64
        ("64:ff9b:1::1", "private"),  # local-use NAT64
        ("64:ff9b::8.8.8.8", None),
        ("192.0.2.1", "private"),  # documentation range
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
        ("8.8.8.8", None),
    ],
)
def test_address_refusal_table(address, refused):
    assert address_refusal(ipaddress.ip_address(address)) == refused


# --- http_fetch: a loopback "public" server ------------------------------------------------------


PUBLIC_IP = "127.0.0.2"
PAGE = (
    "<html><head><title>Tea  &amp; Coffee</title><style>body{color:red}</style>"
    "<script>var secret = 1;</script></head><body><h1>Brewing</h1><p>Use water at"
    "\n   90&deg;C.</p><ul><li>Green</li><li>Black</li></ul><noscript>enable js</noscript></body></html>"
)


CHARSET_BODIES = {
    "windows-1251": "Привет".encode("cp1251"),
    "iso-8859-1": b"\x93quoted\x94",  # what browsers read as windows-1252
    "gb2312": "你好，世界".encode("gbk"),
}
ADVERSARIAL_PAGE = b"<html><body><p>" + b"<i> " * (256 * 1024 - 8) + b"end</p></body></html>"
"""QA's page (``"<i> " * 60000`` froze the server for 37 s), grown to 1 MiB."""


class Hits:
    def __init__(self) -> None:
        self.paths: list[tuple[str, str]] = []
        self.release = threading.Event()


def serve(address: str, hits: Hits, ports: dict) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def reply(self, status: int, body: bytes, content_type: str | None, **headers: str) -> None:
            self.send_response(status)
            if content_type:
                self.send_header("Content-Type", content_type)
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            hits.paths.append((self.path, self.headers.get("Host", "")))
            path = self.path
            if path == "/page":
                self.reply(200, PAGE.encode(), "text/html", Set_Cookie="session=SECRET-COOKIE")
            elif path == "/gbk":
                self.reply(200, "中文页面：你好".encode("gbk"), "text/plain; charset=gbk")
            elif path == "/meta":
                body = '<html><head><meta charset="gbk"><title>标题</title></head><body>正文</body></html>'
                self.reply(200, body.encode("gbk"), "text/html")
            elif path == "/json":
                self.reply(200, b'{"ok": true}', "application/json")
            elif path == "/untyped":
                self.reply(200, b"plain words", None)
            elif path == "/png":
                self.reply(200, b"\x89PNG\r\n\x1a\n" + bytes(100), "image/png")
            elif path == "/big":
                self.reply(200, b"a" * 5000, "text/plain")
            elif path == "/bomb":
                self.reply(200, gzip.compress(b"b" * 2_000_000), "text/plain", Content_Encoding="gzip")
            elif path == "/gzip":
                self.reply(200, gzip.compress(b"small and zipped"), "text/plain", Content_Encoding="gzip")
            elif path == "/missing":
                self.reply(404, b"<html><body><p>Not here</p></body></html>", "text/html")
            elif path == "/host":
                self.reply(200, self.headers.get("Host", "").encode(), "text/plain")
            elif path.startswith("/hop/"):
                left = int(path.rsplit("/", 1)[1])
                self.reply(302, b"", None, Location="/page" if left == 0 else f"/hop/{left - 1}")
            elif path == "/to-loopback":
                self.reply(302, b"", None, Location=f"http://127.0.0.1:{ports['canary']}/canary")
            elif path == "/to-localhost":
                self.reply(301, b"", None, Location=f"http://localhost:{ports['canary']}/canary")
            elif path == "/to-metadata":
                self.reply(307, b"", None, Location="http://169.254.169.254/latest/meta-data/")
            elif path == "/to-file":
                self.reply(302, b"", None, Location="file:///etc/passwd")
            elif path == "/slow":
                hits.release.wait(10)
                self.reply(200, b"late", "text/plain")
            elif path.startswith("/charset/"):
                label = path.split("/", 2)[2]
                self.reply(200, CHARSET_BODIES.get(label, b"hello \xff"), f"text/plain; charset={label}")
            elif path == "/meta-punycode":
                self.reply(
                    200,
                    b'<html><head><meta charset="punycode"></head><body>hello \xff</body></html>',
                    "text/html",
                )
            elif path == "/adversarial":
                self.reply(200, ADVERSARIAL_PAGE, "text/html")
            else:
                self.reply(200, b"canary reached", "text/plain")

    server = ThreadingHTTPServer((address, 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server


@pytest.fixture
def servers() -> Iterator[tuple[str, Hits, Hits]]:
    """``(public base URL, public hits, canary hits)``: the public server at 127.0.0.2, and a
    canary at 127.0.0.1 that a refused redirect must never reach."""
    public_hits, canary_hits, ports = Hits(), Hits(), {}
    canary = serve("127.0.0.1", canary_hits, ports)
    ports["canary"] = canary.server_address[1]
    public = serve(PUBLIC_IP, public_hits, ports)
    yield f"http://{PUBLIC_IP}:{public.server_address[1]}", public_hits, canary_hits
    public_hits.release.set()
    for server in (public, canary):
        server.shutdown()
        server.server_close()


def is_public_test_server(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return str(ip) == PUBLIC_IP


async def names_to_public(host: str, port: int) -> list[str]:
    """A resolver: every ``*.example.test`` name points at the public test server."""
    if host.endswith(".example.test"):
        return [PUBLIC_IP]
    if host == "rebind.example":
        return [PUBLIC_IP, "127.0.0.1"]
    raise OSError("no such host")


def public_policy(**overrides: object) -> FetchPolicy:
    options = {
        "allow_address": is_public_test_server,
        "resolver": names_to_public,
        "timeout": 5.0,
    } | overrides
    return FetchPolicy(**options)


async def fetch_tool(url: str, policy: FetchPolicy | None = None, **arguments: object):
    tool = http_fetch_tool(policy or public_policy())
    return await ToolRegistry([tool]).run(call("http_fetch", {"url": url, **arguments}))


async def test_http_fetch_returns_html_as_readable_text_without_headers_or_scripts(servers):
    base, hits, _ = servers
    outcome = await fetch_tool(f"{base}/page")

    assert outcome.is_error is False
    head, _, text = outcome.content.partition("\n\n")
    assert head.splitlines() == [f"URL: {base}/page", "Status: 200 OK", "Content-Type: text/html"]
    assert text == "Title: Tea & Coffee\n\n# Brewing\n\nUse water at 90°C.\n\n- Green\n- Black"
    assert "secret" not in outcome.content and "SECRET-COOKIE" not in outcome.content
    assert "color:red" not in outcome.content and "enable js" not in outcome.content


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("/gbk", "中文页面：你好"),
        ("/meta", "Title: 标题\n\n正文"),
        ("/json", '{"ok": true}'),
        ("/untyped", "plain words"),
        ("/gzip", "small and zipped"),
    ],
)
async def test_http_fetch_decodes_text_by_its_charset(servers, path, text):
    base, _, _ = servers
    outcome = await fetch_tool(f"{base}{path}")

    assert outcome.is_error is False
    assert outcome.content.split("\n\n", 1)[1] == text


async def test_http_fetch_returns_an_error_status_page_as_text(servers):
    base, _, _ = servers
    outcome = await fetch_tool(f"{base}/missing")

    assert outcome.is_error is False
    assert "Status: 404 Not Found" in outcome.content and outcome.content.endswith("Not here")


async def test_http_fetch_refuses_binary_content(servers):
    base, _, _ = servers
    outcome = await fetch_tool(f"{base}/png")

    assert (outcome.is_error, outcome.content) == (
        True,
        "Error: the content type 'image/png' is not text; http_fetch returns text only",
    )


async def test_http_fetch_reads_at_most_max_bytes_and_says_so(servers):
    base, _, _ = servers
    small = await fetch_tool(f"{base}/big", max_bytes=100)
    policy_cut = await fetch_tool(f"{base}/big", public_policy(max_bytes=1000))
    above_policy = await fetch_tool(f"{base}/big", public_policy(max_bytes=1000), max_bytes=2000)

    assert small.content.endswith("\n\n" + "a" * 100)
    assert "Note: the body was longer than 100 bytes; only the first 100 were read." in small.content
    assert policy_cut.content.endswith("\n\n" + "a" * 1000)
    assert above_policy.is_error is True and "at $.max_bytes" in above_policy.content


async def test_http_fetch_bounds_a_compressed_body_after_decompression(servers):
    base, _, _ = servers
    result = await fetch(f"{base}/bomb", public_policy(max_bytes=10_000))

    assert result.truncated is True and result.text == "b" * 10_000


async def test_http_fetch_follows_redirects_up_to_five(servers):
    base, hits, _ = servers
    five = await fetch_tool(f"{base}/hop/4")
    six = await fetch_tool(f"{base}/hop/5")

    assert five.is_error is False
    assert "Redirects followed: 5" in five.content and f"URL: {base}/page" in five.content
    assert (six.is_error, six.content) == (True, "Error: too many redirects (more than 5)")


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/to-loopback", "refused: 127.0.0.1 is loopback"),
        ("/to-localhost", "refused: localhost is loopback"),
        ("/to-metadata", "refused: 169.254.169.254 is a cloud metadata address"),
        ("/to-file", "refused: only http and https URLs are allowed"),
    ],
)
async def test_a_redirect_to_a_local_address_is_refused_before_connecting(servers, path, reason):
    base, hits, canary = servers
    policy = public_policy(resolver=None)  # the system resolver: localhost → loopback
    outcome = await fetch_tool(f"{base}{path}", policy)

    assert outcome.is_error is True and outcome.content.startswith(f"Error: {reason}")
    assert [p for p, _ in hits.paths] == [path]
    assert canary.paths == []


async def test_http_fetch_connects_to_the_checked_address_with_the_names_host_header(servers):
    base, hits, _ = servers
    port = base.rsplit(":", 1)[1]
    outcome = await fetch_tool(f"http://docs.example.test:{port}/host")

    assert outcome.is_error is False
    assert outcome.content.endswith(f"\n\ndocs.example.test:{port}")
    assert hits.paths == [("/host", f"docs.example.test:{port}")]


async def test_a_name_with_any_local_address_is_refused(servers):
    base, hits, canary = servers
    port = base.rsplit(":", 1)[1]
    outcome = await fetch_tool(f"http://rebind.example:{port}/page")

    assert outcome.is_error is True
    assert (
        outcome.content == "Error: refused: rebind.example is loopback (rebind.example resolves to 127.0.0.1)"
    )
    assert hits.paths == [] and canary.paths == []


async def test_an_unknown_host_is_an_error_result(servers):
    outcome = await fetch_tool("http://nowhere.invalid/")

    assert (outcome.is_error, outcome.content) == (True, "Error: cannot resolve host 'nowhere.invalid'")


async def test_http_fetch_stops_at_its_time_limit(servers):
    base, _, _ = servers
    async with asyncio.timeout(5):
        outcome = await fetch_tool(f"{base}/slow", public_policy(timeout=0.3))

    assert (outcome.is_error, outcome.content) == (True, "Error: http_fetch timed out after 0.3 s")


async def test_the_settings_configure_the_built_in_http_fetch(settings, servers):
    base, _, _ = servers
    settings.PICOBOT = settings.PICOBOT.replace(http_fetch_allow_private=False, http_fetch_max_bytes=64)
    refused = await default_registry([]).run(call("http_fetch", {"url": f"{base}/big"}))
    settings.PICOBOT = settings.PICOBOT.replace(http_fetch_allow_private=True)
    allowed = await default_registry([]).run(call("http_fetch", {"url": f"{base}/big"}))

    assert refused.content == "Error: refused: 127.0.0.2 is loopback"
    assert allowed.is_error is False and allowed.content.endswith("\n\n" + "a" * 64)


def test_html_to_text_keeps_preformatted_text_and_table_cells():
    html = "<pre>a  b\n  c</pre><table><tr><td>x</td><td>y</td></tr></table>"
    assert html_to_text(html) == "a  b\n  c\n\nx | y"


# --- http_fetch: hostile bodies ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "label",
    ["rot13", "idna", "punycode", "base64", "uu", "hex", "zlib", "unicode_escape", "utf-7", "x-user-defined"],
)
async def test_a_charset_that_is_no_web_text_encoding_is_read_as_utf_8(servers, label):
    """QA: ``charset=rot13`` raised LookupError, ``idna`` UnicodeError (both the crash path) and
    ``punycode`` is quadratic; such a charset now counts as none (UTF-8, bad bytes as U+FFFD)."""
    base, _, _ = servers
    outcome = await fetch_tool(f"{base}/charset/{label}")

    assert outcome.is_error is False, outcome.content
    assert outcome.content.split("\n\n", 1)[1] == "hello \ufffd"


@pytest.mark.parametrize(
    ("label", "text"),
    [("windows-1251", "Привет"), ("iso-8859-1", "\u201cquoted\u201d"), ("gb2312", "你好，世界")],
)
async def test_web_charsets_still_decode(servers, label, text):
    base, _, _ = servers
    outcome = await fetch_tool(f"{base}/charset/{label}")

    assert outcome.content.split("\n\n", 1)[1] == text


async def test_a_meta_charset_that_is_no_web_text_encoding_is_ignored(servers):
    base, _, _ = servers
    outcome = await fetch_tool(f"{base}/meta-punycode")

    assert (outcome.is_error, outcome.content.split("\n\n", 1)[1]) == (False, "hello \ufffd")


async def test_a_big_hostile_page_is_made_text_off_the_event_loop(servers, monkeypatch):
    """QA: a 240 KB page of ``"<i> " * 60000`` froze the event loop for 37 s (other users' pings,
    /stop, lease renewal). Page text is now made on a worker thread: while it is being made, the
    loop keeps running. Deterministic: the text maker waits (at most 10 s) for the loop to tick 50
    times — it could never see that if it ran on the loop itself."""
    base, _, _ = servers
    real = http_fetch_module.page_text
    started, ticked = threading.Event(), threading.Event()
    seen: list[bool] = []

    def watched(*args):
        started.set()
        seen.append(ticked.wait(10))
        return real(*args)

    async def heartbeat() -> None:
        ticks = 0
        while ticks < 50:
            await asyncio.sleep(0)
            if started.is_set():
                ticks += 1
        ticked.set()

    monkeypatch.setattr(http_fetch_module, "page_text", watched)
    beat = asyncio.ensure_future(heartbeat())
    async with asyncio.timeout(30):
        outcome = await fetch_tool(f"{base}/adversarial", public_policy(timeout=20.0))
    beat.cancel()

    assert seen == [True]
    assert outcome.is_error is False, outcome.content
    assert outcome.content.split("\n\n", 1)[1] == "end"


async def test_the_time_limit_ends_a_fetch_whose_text_is_still_being_made(servers, monkeypatch):
    base, _, _ = servers
    release = threading.Event()
    stops: list[threading.Event] = []

    def stuck(body, media_type, charset, stop=None):
        stops.append(stop)
        release.wait(10)  # a page that takes long to read
        return "never used"

    monkeypatch.setattr(http_fetch_module, "page_text", stuck)
    try:
        async with asyncio.timeout(5):
            outcome = await fetch_tool(f"{base}/page", public_policy(timeout=0.3))
    finally:
        release.set()

    assert (outcome.is_error, outcome.content) == (True, "Error: http_fetch timed out after 0.3 s")
    assert len(stops) == 1 and stops[0].is_set()  # told to stop: the worker's work ends early
