"""Manual ``/compact`` keeps the newest rows verbatim *at most* ``COMPACT_KEEP_MESSAGES`` (QA 6c).

It used that number as a minimum: with 16 rows of ~40 KB in a 16 000-token window it answered
"Nothing was compacted: only 16 message(s) since the last summary …" — exactly when the turn's
notice told the user to run /compact. It now follows the automatic path's rule
(``compaction.rows_to_keep``): at most N newest rows, fewer when they do not fit the window, and
the boundary never splits a tool call from its result (``compaction.choose_boundary``).
"""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from conversations import storage
from conversations.auth import get_or_create_user
from conversations.context.compaction import rows_to_keep
from conversations.context.compaction_service import compact_dialog, summary_budget
from conversations.context.history import row_to_message
from conversations.context.tokens import REQUEST_OVERHEAD, estimate_message, estimate_messages
from conversations.models import Dialog, Message
from conversations.storage.shapes import message_to_history_row
from providers.testing import ScriptedProvider, script_text

CHANNEL = "cli_chat"
SUMMARY = "The user asked eight long questions; the answers were long."


@database_sync_to_async
def seed(rows: list[dict]) -> Dialog:
    """A dialog holding ``rows`` (``role``, ``content``, optional ``tool_calls``/``tool_call_id``)."""
    owner = get_or_create_user("alice")[0]
    dialog = storage.active_dialog(owner, CHANNEL, "chat-alice")
    for seq, row in enumerate(rows, start=1):
        Message.objects.create(dialog=dialog, seq=seq, **row)
    users = sum(r["role"] == "user" for r in rows)
    Dialog.objects.filter(pk=dialog.pk).update(
        history_revision=len(rows), total_message_count=len(rows), message_count=users
    )
    return Dialog.objects.get(pk=dialog.pk)


@database_sync_to_async
def stored(dialog: Dialog) -> tuple[str, int, list[dict]]:
    fresh = Dialog.objects.get(pk=dialog.pk)
    kept = [
        message_to_history_row(m)
        for m in Message.objects.filter(dialog=fresh, seq__gt=fresh.summary_seq).order_by("seq")
    ]
    return fresh.summary, fresh.summary_seq, kept


def pairs(count: int, chars: int) -> list[dict]:
    rows: list[dict] = []
    for i in range(count):
        rows.append({"role": "user", "content": f"q{i} " + "x" * chars})
        rows.append({"role": "assistant", "content": f"a{i} " + "y" * chars})
    return rows


def history_rows(rows: list[dict]) -> list[dict]:
    return [
        {"seq": seq, "images": [], "reasoning": None, "tool_calls": [], "tool_call_id": None, **row}
        for seq, row in enumerate(rows, start=1)
    ]


def test_rows_to_keep_is_at_most_the_configured_count_and_fewer_when_they_do_not_fit():
    small = history_rows(pairs(8, 10))
    big = history_rows(pairs(8, 8000))
    huge = history_rows(pairs(8, 40000))
    one_big = estimate_message(row_to_message(big[-1]))

    assert rows_to_keep(small, 20, 12800) == 16
    assert rows_to_keep(small, 4, 12800) == 4
    assert rows_to_keep(big, 20, 12800) == (12800 - REQUEST_OVERHEAD) // 2 // one_big == 2
    assert rows_to_keep(huge, 20, 12800) == 0


@pytest.mark.django_db(transaction=True)
async def test_manual_compact_compacts_sixteen_rows_too_big_for_a_small_window(settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_context_window=16000, compact_keep_messages=20)
    dialog = await seed(pairs(8, 40000))  # the QA's shape: 16 rows of ~40 KB

    outcome = await compact_dialog(dialog.id, ScriptedProvider([script_text(SUMMARY)]), timeout=5)

    assert outcome.compacted, outcome.reason
    # Not even one row fits half the budget: only the newest question and its answer stay
    # (the newest user row always does: compaction.choose_boundary).
    assert (outcome.covered_seq, outcome.summarised_rows, outcome.kept_rows) == (14, 14, 2)
    summary, summary_seq, kept = await stored(dialog)
    assert (summary, summary_seq) == (SUMMARY, 14)
    assert [r["content"][:2] for r in kept] == ["q7", "a7"]


@pytest.mark.django_db(transaction=True)
async def test_manual_compact_keeps_the_rows_that_fit_and_never_splits_a_tool_call_from_its_result(settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_context_window=16000, compact_keep_messages=20)
    tail = [
        {"role": "user", "content": "q6 " + "x" * 8000},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "clock", "arguments": {}}]},
        {"role": "tool", "content": "r " + "z" * 8000, "tool_call_id": "c1"},
        {"role": "assistant", "content": "a6 " + "y" * 8000},
    ]
    dialog = await seed(pairs(6, 8000) + tail)  # 16 rows, ~37 000 estimated tokens

    outcome = await compact_dialog(dialog.id, ScriptedProvider([script_text(SUMMARY)]), timeout=5)

    assert outcome.compacted, outcome.reason
    summary, summary_seq, kept = await stored(dialog)
    assert (summary, summary_seq, outcome.covered_seq) == (SUMMARY, 12, 12)
    # The budget stops inside the tool chain (3 rows fit); the cut goes before its user row.
    assert [r["role"] for r in kept] == ["user", "assistant", "tool", "assistant"]
    assert outcome.kept_rows == 4
    kept_messages = [m for m in map(row_to_message, kept) if m is not None]
    assert estimate_messages(kept_messages) <= summary_budget()  # the kept rows fit the window's share
