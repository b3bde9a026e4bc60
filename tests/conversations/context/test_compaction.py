"""Manual compaction (seed 004 §7 ``/compact``, seed 002 Task 6, DESIGN §6): boundary, request,
conditional commit, and the next turn's input."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from channels.db import database_sync_to_async
from hypothesis import given
from hypothesis import strategies as st

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.context.compaction import (
    SUMMARY_INSTRUCTIONS,
    build_summary_request,
    choose_boundary,
    clean_summary,
)
from conversations.context.compaction_service import (
    CompactionError,
    CompactionOutcome,
    compact_dialog,
    nothing_to_compact,
)
from conversations.models import Dialog, Message, now_ms
from providers.base import LLMProvider
from providers.chunks import ProviderChunk
from providers.errors import OverloadedError
from providers.messages import RUNTIME_CONTEXT_MARKER
from providers.testing import ScriptedProvider, script_text
from providers.types import ProviderRequest
from tests.conversations.conftest import make_token

CHANNEL = "cli_chat"


def rows_of(roles: str) -> list[dict]:
    """History rows from a role string: u = user, a = assistant, c = assistant tool call, t = tool."""
    names = {"u": "user", "a": "assistant", "c": "assistant", "t": "tool"}
    return [{"seq": i, "role": names[r], "content": f"{r}{i}"} for i, r in enumerate(roles, start=1)]


# --- choose_boundary (pure) -----------------------------------------------------------------------


def test_the_boundary_keeps_the_newest_rows_and_cuts_before_a_user_row():
    rows = rows_of("uctauaua")  # seq 1..8: u1 c2 t3 a4 u5 a6 u7 a8
    assert choose_boundary(rows, keep=2) == 6  # u7 a8 stay
    assert choose_boundary(rows, keep=3) == 4  # a6 cannot start the kept rows: u5 a6 u7 a8 stay
    assert choose_boundary(rows, keep=4) == 4


def test_the_boundary_never_splits_a_tool_call_from_its_results():
    rows = rows_of("uctctaua")  # u1 c2 t3 c4 t5 a6 u7 a8
    for keep in range(0, 3):
        assert choose_boundary(rows, keep) == 6
    assert choose_boundary(rows, keep=3) is None  # only u1 could start the kept rows: nothing before it


def test_nothing_to_compact_gives_none():
    assert choose_boundary([], keep=0) is None
    assert choose_boundary(rows_of("ua"), keep=0) is None  # the newest user row always stays
    assert choose_boundary(rows_of("uaua"), keep=4) is None


@given(st.text(alphabet="uact", max_size=30), st.integers(0, 12))
def test_the_boundary_is_the_highest_safe_cut(roles, keep):
    rows = rows_of(roles)
    boundary = choose_boundary(rows, keep)
    safe = [
        r["seq"]
        for i, r in enumerate(rows[:-1])
        if rows[i + 1]["role"] == "user" and len(rows) - (i + 1) >= keep
    ]
    assert boundary == (max(safe) if safe else None)


# --- the summary request (pure) -------------------------------------------------------------------


def test_the_summary_request_carries_text_and_tool_activity_but_never_reasoning():
    rows = [
        {
            "seq": 1,
            "role": "user",
            "content": "Plan my Kyoto trip.",
            "media_refs": [{"mime_type": "image/png"}],
        },
        {
            "seq": 2,
            "role": "assistant",
            "content": "<think>SECRET-THINK</think>Let me check the weather.",
            "reasoning": "SECRET-REASONING",
            "provider_state": {"blocks": ["SECRET-STATE"]},
            "tool_calls": [{"id": "c1", "name": "weather", "arguments": {"city": "Kyoto"}}],
        },
        {
            "seq": 3,
            "role": "tool",
            "content": "Sunny. " + "x" * 2000,
            "tool_name": "weather",
            "is_error": False,
        },
        {"seq": 4, "role": "tool", "content": "quota exceeded", "tool_name": "maps", "is_error": True},
    ]
    request = build_summary_request("The user is vegetarian.", rows, max_tool_chars=100)
    system, user = request.messages
    assert system.text == SUMMARY_INSTRUCTIONS
    for wanted in ("preferences", "decisions", "open tasks"):
        assert wanted in system.text
    text = user.text
    assert text.startswith("Previous summary:\nThe user is vegetarian.")
    assert "[user] Plan my Kyoto trip. [1 image(s) attached]" in text
    assert "[assistant] Let me check the weather." in text
    assert '[assistant called weather] {"city": "Kyoto"}' in text
    assert "[tool weather result] Sunny." in text and "x" * 200 not in text
    assert "[tool maps error] quota exceeded" in text
    assert "SECRET" not in text


@pytest.mark.parametrize(
    ("answer", "summary"),
    [
        ("<think>let me see</think>\n- The user plans a trip.\n", "- The user plans a trip."),
        ("<think>cut off in the middle", None),
        ("<think>only</think>", None),
        ("  \n", None),
    ],
)
def test_clean_summary(answer, summary):
    assert clean_summary(answer) == summary


# --- the service ----------------------------------------------------------------------------------


class GatedProvider(LLMProvider):
    """Answers from a script once ``gate`` is set; ``entered`` tells the test the call began."""

    name = "gated"
    model = "gated-model"
    offline = False

    def __init__(self, responses: list) -> None:
        self.inner = ScriptedProvider(responses)
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderChunk]:
        self.entered.set()
        await self.gate.wait()
        async for chunk in self.inner.stream(request):
            yield chunk


@database_sync_to_async
def seed_dialog(roles: str, username: str = "alice", **fields) -> Dialog:
    owner = get_or_create_user(username)[0]
    dialog = storage.active_dialog(owner, CHANNEL, f"chat-{username}")
    for row in rows_of(roles):
        extra = {"reasoning_content": "SECRET-REASONING"} if row["role"] == "assistant" else {}
        if row["content"].startswith("c"):
            extra["tool_calls"] = [{"id": f"call{row['seq']}", "name": "clock", "arguments": {}}]
        if row["role"] == "tool":
            extra["tool_call_id"] = f"call{row['seq'] - 1}"
        Message.objects.create(
            dialog=dialog, seq=row["seq"], role=row["role"], content=row["content"], **extra
        )
    Dialog.objects.filter(pk=dialog.pk).update(history_revision=len(roles), auto_compact_failures=3, **fields)
    return Dialog.objects.get(pk=dialog.pk)


@database_sync_to_async
def reload(dialog: Dialog) -> Dialog:
    return Dialog.objects.get(pk=dialog.pk)


transactional = pytest.mark.django_db(transaction=True)


@transactional
async def test_a_compaction_folds_the_older_rows_into_the_summary_and_keeps_history():
    dialog = await seed_dialog("uctauaua")
    provider = ScriptedProvider([script_text("<think>hmm</think>The user asked the time twice.")])

    outcome = await compact_dialog(dialog.id, provider, keep=2, timeout=5)

    assert (outcome.compacted, outcome.covered_seq, outcome.summarised_rows, outcome.kept_rows) == (
        True,
        6,
        6,
        2,
    )
    assert outcome.summary_chars == len("The user asked the time twice.") and "6 earlier" in outcome.notice
    after = await reload(dialog)
    assert (after.summary, after.summary_seq, after.auto_compact_failures) == (
        "The user asked the time twice.",
        6,
        0,
    )
    assert await database_sync_to_async(Message.objects.filter(dialog=dialog).count)() == 8
    prompt = provider.requests[0].messages[1].text
    assert "[user] u1" in prompt and "[user] u5" in prompt and "u7" not in prompt
    assert "SECRET" not in prompt


@transactional
async def test_a_second_compaction_summarises_the_previous_summary_and_the_newer_rows_only():
    dialog = await seed_dialog("uauauaua", summary="Earlier: the user likes tea.", summary_seq=4)
    provider = ScriptedProvider([script_text("Tea lover; asked about u5.")])

    outcome = await compact_dialog(dialog.id, provider, keep=2, timeout=5)

    assert (outcome.compacted, outcome.covered_seq, outcome.summarised_rows) == (True, 6, 2)
    prompt = provider.requests[0].messages[1].text
    assert "Previous summary:\nEarlier: the user likes tea." in prompt
    assert "u1" not in prompt and "[user] u5" in prompt and "u7" not in prompt


@transactional
async def test_nothing_to_compact_is_an_outcome_with_a_reason_and_no_model_call():
    dialog = await seed_dialog("uaua")
    provider = ScriptedProvider([])

    outcome = await compact_dialog(dialog.id, provider, keep=20, timeout=5)

    assert not outcome.compacted and outcome.covered_seq is None
    assert outcome.notice == (
        "Nothing to compact yet: the last 4 messages are always kept as they are, "
        "and there is nothing older since the last summary."
    )
    assert provider.requests == []
    assert (await reload(dialog)).summary_seq == 0


@transactional
@pytest.mark.parametrize(
    ("answer", "wording"),
    [
        (
            OverloadedError("upstream says SECRET-DETAIL", http_status=529),
            "provider is overloaded (overloaded",
        ),
        (script_text("<think>the summary would be"), "no usable summary"),
        (script_text(""), "no usable summary"),
        # Cut off at max_tokens (QA 6): it stops mid-sentence, like an unclosed think span.
        (script_text("The user asked about Kyoto and then the", finish_reason="length"), "cut off"),
        (script_text("The user asked about Kyoto and then the", finish_reason="max_tokens"), "cut off"),
        (RuntimeError("SECRET-DETAIL"), "Internal error"),
    ],
)
async def test_a_failed_summary_raises_a_user_facing_error_and_changes_nothing(answer, wording):
    dialog = await seed_dialog("uauaua")
    provider = ScriptedProvider([answer])

    with pytest.raises(CompactionError) as caught:
        await compact_dialog(dialog.id, provider, keep=2, timeout=5)

    assert wording in caught.value.message and caught.value.ref in caught.value.message
    assert "SECRET" not in caught.value.message
    after = await reload(dialog)
    assert (after.summary, after.summary_seq, after.auto_compact_failures) == ("", 0, 3)


@transactional
async def test_a_summary_past_the_timeout_raises_and_changes_nothing():
    dialog = await seed_dialog("uauaua")
    provider = GatedProvider([script_text("never")])  # the gate never opens

    with pytest.raises(CompactionError, match="within 0.05 s"):
        await compact_dialog(dialog.id, provider, keep=2, timeout=0.05)

    assert (await reload(dialog)).summary_seq == 0


@transactional
async def test_a_concurrent_compaction_that_committed_first_wins_and_ours_is_discarded():
    dialog = await seed_dialog("uauauaua")
    slow = GatedProvider([script_text("Slow summary.")])
    ours = asyncio.ensure_future(compact_dialog(dialog.id, slow, keep=2, timeout=5))
    await slow.entered.wait()  # ours has read the source and is waiting for the model

    theirs = await compact_dialog(
        dialog.id, ScriptedProvider([script_text("Fast summary.")]), keep=2, timeout=5
    )
    slow.gate.set()
    outcome = await ours

    assert theirs.compacted
    assert not outcome.compacted and "another compaction" in outcome.reason
    after = await reload(dialog)
    assert (after.summary, after.summary_seq) == ("Fast summary.", 6)


@transactional
async def test_the_offline_provider_and_a_deleted_dialog_are_refused():
    dialog = await seed_dialog("uauaua")
    offline = ScriptedProvider([], offline=True)
    with pytest.raises(CompactionError, match="configured model"):
        await compact_dialog(dialog.id, offline, keep=2, timeout=5)

    gone = await seed_dialog("uauaua", username="bob", deleted_at=now_ms())
    with pytest.raises(storage.NotFoundError):
        await compact_dialog(gone.id, ScriptedProvider([]), keep=2, timeout=5)


# --- the next turn after a compaction -------------------------------------------------------------


@transactional
async def test_after_a_compaction_the_next_turn_sees_the_summary_and_only_the_newer_rows(
    connect, start_worker, settings
):
    settings.PICOBOT = settings.PICOBOT.replace(auto_title_after=0)
    provider = ScriptedProvider(
        [
            script_text("Answer one."),
            script_text("Answer two."),
            script_text("Answer three."),
            script_text("SUMMARY: the user asked one and two."),
            script_text("Answer four."),
        ]
    )
    await start_worker(provider)
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]

    async def turn(content: str) -> dict:
        await client.send({"type": "message", "content": content, "client_msg_id": content})
        return await client.until("turn_committed", lambda f: f["messages"][0]["content"] == content)

    for content in ("one", "two", "three"):
        await turn(content)
    outcome = await compact_dialog(session_id, provider, keep=2, timeout=5)
    assert (outcome.compacted, outcome.covered_seq) == (True, 4)

    committed = await turn("four")
    assert [m["seq"] for m in committed["messages"]] == [7, 8]  # history seqs go on; nothing deleted

    request = provider.requests[-1]
    system, *rest = request.messages
    assert system.role == "system" and "SUMMARY: the user asked one and two." in system.text
    assert [(m.role, m.text.split(RUNTIME_CONTEXT_MARKER)[0]) for m in rest] == [
        ("user", "three"),
        ("assistant", "Answer three."),
        ("user", "four"),
    ]


@pytest.mark.parametrize(
    ("rows", "kept", "answer"),
    [
        (0, 0, "Nothing to compact yet: there are no messages since the last summary."),
        (
            1,
            1,
            "Nothing to compact yet: the last message is always kept as it is, "
            "and there is nothing older since the last summary.",
        ),
        (
            2,
            2,
            "Nothing to compact yet: the last 2 messages are always kept as they are, "
            "and there is nothing older since the last summary.",
        ),
    ],
)
def test_the_nothing_to_compact_answer_is_plain_words(rows, kept, answer):
    assert nothing_to_compact(rows, kept) == answer
    assert "(s)" not in answer


@pytest.mark.parametrize(
    ("summarised", "kept", "answer"),
    [
        (
            4,
            2,
            "Compacted 4 earlier messages into a summary of 1,200 characters that the model reads "
            "instead; the 2 newer messages are sent as they are. Your history is unchanged.",
        ),
        (
            1,
            1,
            "Compacted 1 earlier message into a summary of 1,200 characters that the model reads "
            "instead; the newer message is sent as it is. Your history is unchanged.",
        ),
    ],
)
def test_the_compacted_answer_counts_in_plain_words(summarised, kept, answer):
    outcome = CompactionOutcome(
        compacted=True, covered_seq=9, summarised_rows=summarised, kept_rows=kept, summary_chars=1200
    )
    assert outcome.notice == answer
