from __future__ import annotations

import copy
import json

import pytest

from delivery.events import ReasoningDelta, TextDelta, TextSegmentFinished, ToolFinished, ToolStarted
from delivery.presentation import (
    COMPACT_PREVIEW_CHARS,
    PresentationPolicy,
    ReasoningVisibility,
    ToolVisibility,
    serialize_snapshot,
)
from delivery.turn import TurnController


def sample_turn() -> dict:
    c = TurnController("t", "s", "m")
    c.apply(ReasoningDelta(0, "secret thoughts"))
    c.apply(TextDelta(0, "Looking."))
    c.apply(ToolStarted(0, "call_1", "read_file", {"path": "/etc/motd"}))
    c.apply(ToolFinished(0, "call_1", True, "y" * 500))
    c.apply(TextDelta(1, "Done: 界"))
    return c.snapshot().to_dict()


def test_websocket_preset_keeps_everything_and_hints_collapsed_reasoning():
    turn = sample_turn()
    out = PresentationPolicy.websocket().apply(turn)
    assert [b["type"] for b in out["blocks"]] == ["reasoning", "assistant", "tool", "assistant"]
    assert out["blocks"][2]["arguments"] == {"path": "/etc/motd"}
    assert out["presentation"] == {"reasoning": "collapsed", "tools": "detailed"}
    assert PresentationPolicy.websocket().live is True


def test_external_preset_hides_reasoning_and_compacts_tools():
    out = PresentationPolicy.external().apply(sample_turn())
    assert [b["type"] for b in out["blocks"]] == ["assistant", "tool", "assistant"]
    tool = out["blocks"][1]
    assert "arguments" not in tool
    assert tool["name"] == "read_file" and tool["status"] == "completed"
    assert len(tool["preview"]) == COMPACT_PREVIEW_CHARS
    assert "secret thoughts" not in json.dumps(out)


def test_final_only_preset_is_not_live():
    policy = PresentationPolicy.final_only()
    assert (policy.reasoning, policy.tools, policy.live) == (
        ReasoningVisibility.HIDDEN,
        ToolVisibility.COMPACT,
        False,
    )


def test_hidden_tools_are_omitted():
    out = PresentationPolicy("expanded", "hidden").apply(sample_turn())
    assert [b["type"] for b in out["blocks"]] == ["reasoning", "assistant", "assistant"]


@pytest.mark.parametrize("reasoning", list(ReasoningVisibility))
@pytest.mark.parametrize("tools", list(ToolVisibility))
def test_apply_never_mutates_its_input(reasoning, tools):
    turn = sample_turn()
    before = copy.deepcopy(turn)
    out = PresentationPolicy(reasoning, tools).apply(turn)
    out["blocks"].clear()
    assert turn == before


def test_unknown_values_are_refused():
    with pytest.raises(ValueError):
        PresentationPolicy(reasoning="shown")
    with pytest.raises(ValueError):
        PresentationPolicy(tools="verbose")


def test_serialize_snapshot_is_compact_and_keeps_non_ascii():
    c = TurnController("t", "s", "m")
    c.apply(TextDelta(0, "界"))
    text = serialize_snapshot(c.snapshot(), PresentationPolicy.websocket())
    assert "界" in text and ": " not in text and ", " not in text
    assert json.loads(text)["blocks"][0]["text"] == "界"


def split_answer() -> TurnController:
    """Reasoning in the middle of one model response: one assistant message in history."""
    c = TurnController("t", "s", "m")
    c.apply(TextDelta(0, "The answer is "))
    c.apply(ReasoningDelta(0, "secret"))
    c.apply(TextDelta(0, "42."))
    return c


def test_hiding_reasoning_merges_the_answer_it_split():
    c = split_answer()
    view = PresentationPolicy.external().present(c.snapshot())
    assert [(b["type"], b["id"], b["text"]) for b in view.blocks] == [
        ("assistant", "t.0", "The answer is 42.")
    ]
    assert view.answer_text() == "The answer is 42."
    assert view.to_dict()["presentation"] == {"reasoning": "hidden", "tools": "compact"}
    wire = PresentationPolicy.external().apply(c.snapshot().to_dict())
    assert wire["blocks"] == view.to_dict()["blocks"]
    shown = PresentationPolicy.websocket().present(c.snapshot())
    assert [b["type"] for b in shown.blocks] == ["assistant", "reasoning", "assistant"]


def test_answer_text_is_one_part_per_committed_assistant_message():
    c = split_answer()
    assert c.snapshot().answer_text() == "The answer is 42."  # not "The answer is \n\n42."
    c.apply(TextSegmentFinished(0))
    c.apply(ToolStarted(0, "call_1", "read_file", {}))
    c.apply(ToolFinished(0, "call_1", True, "ok"))
    c.apply(ReasoningDelta(1, "more"))
    c.apply(TextDelta(1, "Done."))
    assert c.snapshot().answer_text() == "The answer is 42.\n\nDone."


def test_a_segment_boundary_is_kept_when_the_blocks_between_are_hidden():
    c = TurnController("t", "s", "m")
    c.apply(TextDelta(0, "first"))
    c.apply(TextSegmentFinished(0))
    c.apply(ReasoningDelta(0, "r"))
    c.apply(TextDelta(0, "second"))
    c.apply(ToolStarted(0, "call_1", "x", {}))
    c.apply(TextDelta(0, "third"))
    view = PresentationPolicy("hidden", "hidden").present(c.snapshot())
    assert [b["text"] for b in view.blocks] == ["first", "second", "third"]
    assert view.answer_text(" | ") == "first | second | third"


def test_presenting_a_presented_snapshot_does_not_filter_again():
    policy = PresentationPolicy.external()
    view = policy.present(split_answer().snapshot())
    assert policy.present(view) is view
    assert serialize_snapshot(view, policy) == serialize_snapshot(split_answer().snapshot(), policy)
