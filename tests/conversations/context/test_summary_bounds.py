"""A summary is bounded (``summary_token_cap``, ``MAX_SUMMARY_CHARS`` in ``context/compaction.py``).

The summary request asks for at most a cap of tokens (and allows the model twice that); a summary
over half the input budget is refused rather than used, by automatic compaction (the turn goes
on without it, leaving old turns out, and the user reads the failed compaction's notice) and by
``/compact`` alike; a summary cut off at its output limit is refused the same way; and
``clean_summary`` cuts a runaway one to ``MAX_SUMMARY_CHARS``.
"""

from __future__ import annotations

import pytest

from conversations.context.compaction import MAX_SUMMARY_CHARS, clean_summary, summary_token_cap
from conversations.context.compaction_service import CompactionError, compact_dialog
from conversations.context.turn_input import TurnInputBuilder
from providers.testing import ScriptedProvider, script_text
from tests.conversations.context.dialog_rows import reload, seed, start_of

pytestmark = [pytest.mark.django_db(transaction=True)]


HUGE_SUMMARY = "S " * 20_000  # the QA's t_compact3.py: a model that returns 40,000 characters


async def test_an_oversized_summary_is_refused_and_the_turn_goes_on_without_it():
    dialog = await seed(30, chars=400)  # ≈ 7,000 estimated tokens; the window is 8,000 (share 6,400)
    provider = ScriptedProvider([script_text(HUGE_SUMMARY)])
    build = TurnInputBuilder(provider, system_prompt="sys", window_tokens=8000, keep_messages=4)
    prepared = await build.prepare(await start_of(dialog.id))

    assert prepared.compression is None, "a summary over half the budget is not used"
    assert prepared.dropped_messages > 0 and prepared.estimate <= 8000 * 0.8
    assert not any("S S S" in m.text for m in prepared.messages)
    [notice] = prepared.notices
    assert notice.startswith("Automatic compaction failed: The model's summary was too long to use")
    after = await reload(dialog.id)
    assert (after.summary, after.summary_seq, after.auto_compact_failures) == ("", 0, 1)
    cap = summary_token_cap(int(8000 * 0.8))
    assert provider.requests[0].max_tokens == 2 * cap
    assert f"at most about {cap:,} tokens" in provider.requests[0].messages[-1].text


async def test_an_automatic_summary_cut_off_at_max_tokens_is_refused_and_the_turn_goes_on_without_it():
    """QA 6: finish_reason "length" means the summary stops mid-sentence; it must not replace the
    history it summarises (the failure is visible as the automatic compaction notice)."""
    dialog = await seed(30, chars=400)
    provider = ScriptedProvider(
        [script_text("The user asked about topic 1 and then the", finish_reason="length")]
    )
    build = TurnInputBuilder(provider, system_prompt="sys", window_tokens=8000, keep_messages=4)
    prepared = await build.prepare(await start_of(dialog.id))

    assert prepared.compression is None
    [notice] = prepared.notices
    assert notice.startswith(
        "Automatic compaction failed: The model's summary was cut off at its output limit"
    )
    after = await reload(dialog.id)
    assert (after.summary, after.summary_seq, after.auto_compact_failures) == ("", 0, 1)


async def test_a_manual_compact_refuses_an_oversized_summary(settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_context_window=8000)
    dialog = await seed(30, chars=400)
    with pytest.raises(CompactionError, match="too long to use"):
        await compact_dialog(dialog.id, ScriptedProvider([script_text(HUGE_SUMMARY)]), keep=4)
    after = await reload(dialog.id)
    assert (after.summary, after.summary_seq) == ("", 0)


def test_clean_summary_cuts_a_runaway_summary():
    summary = clean_summary("word " * 10_000)
    assert len(summary) <= MAX_SUMMARY_CHARS and summary.endswith("word…")
    assert clean_summary("  short summary  ") == "short summary"
    assert len(clean_summary("x" * 500, max_chars=100)) == 100
