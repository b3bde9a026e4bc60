"""cards: what the answer card shows while a turn runs and when it ends."""

from __future__ import annotations

import json

import pytest

from delivery.events import ReasoningDelta, TextDelta, ToolFinished, ToolStarted
from delivery.platforms.feishu.cards import (
    ANSWER_ELEMENT,
    CARD_TEXT_BUDGET,
    CONTINUED_NOTE,
    NO_ANSWER_TEXT,
    TRUNCATED_NOTE,
    card_reference,
    has_visible_content,
    indicator,
    post_content,
    render_blocks,
    render_final,
    render_markdown,
    safe_text,
    streaming_card,
    text_size,
)
from delivery.snapshot import TurnPhase, TurnSnapshot, TurnStatus

from .turns import SECRET, text_tool_text, turn, view


def snapshot(
    blocks, status=TurnStatus.RUNNING, phase=TurnPhase.RESPONDING, error=None, **extra
) -> TurnSnapshot:
    return TurnSnapshot("t1", "s", "m", 1, status, phase, tuple(blocks), None, error, **extra)


def test_running_text_shows_blocks_in_order_then_the_phase_indicator():
    views = text_tool_text(turn())
    last = render_markdown(views[-1])
    assert last == "Let me look that up.\n\n🔧 `web_search` ✓ — 3 results\n\nThe answer is 42.\n\n…"
    acting = render_markdown(views[3])
    assert acting == "Let me look that up.\n\n⏳ `web_search`\n\n🔧 Running tools…"
    assert all(SECRET not in render_markdown(v) for v in views)


@pytest.mark.parametrize(
    ("phase", "line"),
    [
        ("queued", "⏳ Thinking…"),
        ("reasoning", "⏳ Thinking…"),
        ("acting", "🔧 Running tools…"),
        ("responding", "✍️ …"),
        ("compacting", "🗜️ Compacting…"),
        ("finalizing", "…"),
    ],
)
def test_each_phase_has_its_indicator(phase, line):
    assert indicator(phase) == line
    assert render_markdown(snapshot([], phase=TurnPhase(phase))) == line


def test_reasoning_blocks_never_render_even_if_a_policy_let_them_through():
    blocks = [
        {"type": "reasoning", "id": "r", "iteration": 0, "text": SECRET},
        {"type": "assistant", "id": "a", "iteration": 0, "text": "Hi"},
    ]
    assert SECRET not in render_markdown(snapshot(blocks))
    assert SECRET not in render_final(snapshot(blocks, status=TurnStatus.COMPLETED))
    assert not has_visible_content(snapshot(blocks[:1]))
    assert has_visible_content(snapshot(blocks[1:]))


def test_tool_lines_show_failure_and_a_short_single_line_preview():
    blocks = [
        {
            "type": "tool",
            "id": "c1",
            "iteration": 0,
            "name": "a`b",
            "status": "failed",
            "preview": "boom\nline2",
        },
        {
            "type": "tool",
            "id": "c2",
            "iteration": 0,
            "name": "fetch",
            "status": "completed",
            "preview": "z" * 300,
        },
    ]
    lines = render_blocks(blocks).split("\n")
    assert lines[0] == "🔧 `a'b` ✗ failed — boom line2"
    assert lines[1].startswith("🔧 `fetch` ✓ — zzz") and lines[1].endswith("…") and len(lines[1]) < 130


def test_final_of_a_completed_turn_is_the_blocks_without_indicator():
    c = turn()
    text_tool_text(c)
    c.complete()
    assert (
        render_final(view(c)) == "Let me look that up.\n\n🔧 `web_search` ✓ — 3 results\n\nThe answer is 42."
    )


def test_final_notes_no_answer_failure_stop_and_truncation():
    c = turn()
    c.apply(ReasoningDelta(0, SECRET))
    c.complete()
    assert render_final(view(c)) == NO_ANSWER_TEXT
    tools_only = turn()
    tools_only.apply(ToolStarted(0, "c", "clock", {}))
    tools_only.apply(ToolFinished(0, "c", True, None))
    tools_only.complete()
    assert render_final(view(tools_only)) == f"🔧 `clock` ✓\n\n{NO_ANSWER_TEXT}"
    failed = turn()
    failed.apply(TextDelta(0, "Partial"))
    failed.fail("provider timeout")
    assert render_final(view(failed)) == "Partial\n\n⚠️ This answer failed: provider timeout"
    stopped = turn()
    stopped.apply(TextDelta(0, "Partial"))
    stopped.cancel("stopped by user")
    assert render_final(view(stopped)) == "Partial\n\n⏹ Stopped (stopped by user)"
    plain_stop = turn()
    plain_stop.apply(TextDelta(0, "Partial"))
    plain_stop.cancel("stopped")  # /stop's own reason says nothing new: not "Stopped (stopped)"
    assert render_final(view(plain_stop)) == "Partial\n\n⏹ Stopped."
    cut = turn()
    cut.apply(TextDelta(0, "Long answer"))
    cut.complete(truncated=True)
    assert render_final(view(cut)) == f"Long answer\n\n{TRUNCATED_NOTE}"


@pytest.mark.parametrize("text", ["\ud83d", "a\udc00b", "", "   \n\n ", "\x00"])
def test_lone_surrogates_and_blank_answers_never_give_an_empty_or_unencodable_text(text):
    blocks = [{"type": "assistant", "id": "a", "iteration": 0, "text": text}]
    for status in TurnStatus:
        rendered = (render_markdown if status is TurnStatus.RUNNING else render_final)(
            snapshot(blocks, status)
        )
        assert rendered.strip()
        rendered.encode("utf-8")
        assert "\x00" not in rendered
    assert safe_text(text).strip()
    assert "\ufffd" in safe_text("x\ud800y")
    safe_text(text, empty=" ").encode("utf-8")


def test_at_tags_from_the_model_cannot_mention_anyone():
    text = safe_text('hi <at id=all></at> and <AT user_id="ou_1">x</AT>')
    assert "<at" not in text.lower()
    assert "<\u200bat id=all>" in text


def test_a_running_text_over_the_budget_shows_its_first_part_and_a_note():
    long = ("汉字 " * 50 + "\n\n") * 400
    s = snapshot([{"type": "assistant", "id": "a", "iteration": 0, "text": long}], phase=TurnPhase.RESPONDING)
    text = render_markdown(s)
    assert text_size(text) <= CARD_TEXT_BUDGET
    assert text.endswith(f"\n\n{CONTINUED_NOTE}\n\n✍️ …")
    assert long.startswith(text[: -len(f"\n\n{CONTINUED_NOTE}\n\n✍️ …")])


def test_card_json_shapes():
    card = streaming_card("hello")
    assert card["schema"] == "2.0"
    assert card["config"]["streaming_mode"] is True and card["config"]["update_multi"] is True
    assert card["body"]["elements"] == [{"tag": "markdown", "element_id": ANSWER_ELEMENT, "content": "hello"}]
    assert post_content("x") == {"zh_cn": {"title": "", "content": [[{"tag": "md", "text": "x"}]]}}
    assert card_reference("c1") == {"type": "card", "data": {"card_id": "c1"}}
    full = post_content("汉" * (CARD_TEXT_BUDGET // 3 - 2))
    assert len(json.dumps(full, ensure_ascii=False).encode()) <= 30 * 1024


def test_text_size_counts_escapes_and_utf8():
    assert text_size("a") == 3
    assert text_size("\n") == 4
    assert text_size("汉") == 5
    assert text_size("\ud800") == 5
