from __future__ import annotations

import json

import pytest

from delivery.events import (
    PhaseChanged,
    ReasoningDelta,
    TextDelta,
    TextSegmentFinished,
    ToolFinished,
    ToolStarted,
)
from delivery.presentation import PresentationPolicy, serialize_snapshot
from delivery.snapshot import TurnPhase, TurnStatus
from delivery.turn import MAX_ARGUMENTS_BYTES, MAX_PREVIEW_CHARS, TurnController, TurnEventError


def make() -> TurnController:
    return TurnController("t1", "cli_chat:u1:d1", "m1")


def shape(controller: TurnController) -> list[tuple]:
    out = []
    for block in controller.snapshot().blocks:
        if block["type"] == "tool":
            out.append(("tool", block["iteration"], block["id"], block["status"]))
        else:
            out.append((block["type"], block["iteration"], block["text"]))
    return out


def test_a_new_turn_is_queued_at_revision_zero_with_no_blocks():
    snap = make().snapshot()
    assert snap.to_dict() == {
        "id": "t1",
        "session_id": "cli_chat:u1:d1",
        "message_id": "m1",
        "revision": 0,
        "status": "running",
        "phase": "queued",
        "blocks": [],
        "usage": None,
        "error": None,
    }
    assert not snap.is_terminal


def test_blocks_follow_reasoning_text_tool_reasoning_text_order():
    c = make()
    for event in [
        ReasoningDelta(0, "let me "),
        ReasoningDelta(0, "think"),
        TextDelta(0, "I will "),
        TextDelta(0, "look."),
        TextSegmentFinished(0),
        ToolStarted(0, "call_1", "search", {"q": "x"}),
        ToolFinished(0, "call_1", True, "3 hits"),
        ReasoningDelta(1, "found"),
        TextDelta(1, "Here."),
    ]:
        c.apply(event)
    assert shape(c) == [
        ("reasoning", 0, "let me think"),
        ("assistant", 0, "I will look."),
        ("tool", 0, "call_1", "completed"),
        ("reasoning", 1, "found"),
        ("assistant", 1, "Here."),
    ]
    tool = c.snapshot().to_dict()["blocks"][2]
    assert tool == {
        "type": "tool",
        "id": "call_1",
        "iteration": 0,
        "name": "search",
        "arguments": {"q": "x"},
        "status": "completed",
        "preview": "3 hits",
    }


def test_text_after_a_segment_boundary_starts_a_new_block_in_the_same_iteration():
    c = make()
    c.apply(TextDelta(0, "a"))
    assert c.apply(TextSegmentFinished(0)) is False
    c.apply(TextDelta(0, "b"))
    assert shape(c) == [("assistant", 0, "a"), ("assistant", 0, "b")]


def test_a_change_of_iteration_starts_a_new_block():
    c = make()
    c.apply(TextDelta(0, "a"))
    c.apply(TextDelta(1, "b"))
    c.apply(ReasoningDelta(1, "r"))
    c.apply(ReasoningDelta(2, "s"))
    assert shape(c) == [
        ("assistant", 0, "a"),
        ("assistant", 1, "b"),
        ("reasoning", 1, "r"),
        ("reasoning", 2, "s"),
    ]


def test_block_ids_are_unique_and_stable_across_revisions():
    c = make()
    c.apply(ReasoningDelta(0, "r"))
    first_ids = [b["id"] for b in c.snapshot().blocks]
    c.apply(TextDelta(0, "x"))
    c.apply(ReasoningDelta(0, "again"))
    ids = [b["id"] for b in c.snapshot().blocks]
    assert ids[0] == first_ids[0]
    assert len(set(ids)) == 3


def test_empty_deltas_are_ignored_without_a_new_revision():
    c = make()
    assert c.apply(TextDelta(0, "")) is False
    assert c.apply(ReasoningDelta(0, "")) is False
    assert c.revision == 0
    assert c.snapshot().blocks == ()


def test_every_visible_change_bumps_the_revision_by_one():
    c = make()
    assert c.apply(TextDelta(0, "a")) is True
    assert c.revision == 1
    assert c.set_phase(TurnPhase.COMPACTING) is True
    assert c.revision == 2
    assert c.set_phase("compacting") is False
    assert c.revision == 2


def test_phases_follow_the_events():
    c = make()
    assert c.phase is TurnPhase.QUEUED
    c.apply(ReasoningDelta(0, "r"))
    assert c.phase is TurnPhase.REASONING
    c.apply(TextDelta(0, "t"))
    assert c.phase is TurnPhase.RESPONDING
    c.apply(ToolStarted(0, "a", "x", {}))
    c.apply(ToolStarted(0, "b", "y", "{broken"))
    assert c.phase is TurnPhase.ACTING
    c.apply(ToolFinished(0, "a", True))
    assert c.phase is TurnPhase.ACTING, "acting until every running tool finished"
    c.apply(ToolFinished(0, "b", False, "bad arguments"))
    assert c.phase is TurnPhase.QUEUED, "waiting for the model again"
    c.apply(PhaseChanged(TurnPhase.COMPACTING))
    assert c.phase is TurnPhase.COMPACTING
    c.begin_finalizing()
    assert c.phase is TurnPhase.FINALIZING
    c.complete()
    assert c.snapshot().phase is TurnPhase.FINALIZING


def test_a_failed_tool_is_shown_failed_and_the_turn_goes_on():
    c = make()
    c.apply(ToolStarted(0, "a", "nope", {}))
    c.apply(ToolFinished(0, "a", False, "unknown tool"))
    c.apply(TextDelta(1, "sorry"))
    assert shape(c) == [("tool", 0, "a", "failed"), ("assistant", 1, "sorry")]
    assert c.status is TurnStatus.RUNNING


def test_complete_sets_usage_and_freezes_the_turn():
    c = make()
    c.apply(TextDelta(0, "hi"))
    assert c.complete({"input_tokens": 3, "output_tokens": 1}) is True
    final = c.snapshot()
    assert final.status is TurnStatus.COMPLETED and final.is_terminal
    assert final.usage == {"input_tokens": 3, "output_tokens": 1}
    assert "empty_answer" not in final.to_dict()
    assert c.apply(TextDelta(0, "late")) is False
    assert c.cancel("late") is False
    assert c.fail("late") is False
    assert c.complete() is False
    assert c.set_phase(TurnPhase.ACTING) is False
    assert c.snapshot() is final


def test_a_reasoning_only_turn_completes_without_inventing_an_answer():
    c = make()
    c.apply(ReasoningDelta(0, "hmm"))
    c.complete()
    turn = c.snapshot().to_dict()
    assert turn["status"] == "completed"
    assert turn["error"] is None
    assert turn["empty_answer"] is True
    assert [b["type"] for b in turn["blocks"]] == ["reasoning"]
    assert c.snapshot().answer_text() == ""


def test_cancel_keeps_the_partial_answer_and_fails_running_tools():
    c = make()
    c.apply(TextDelta(0, "partial"))
    c.apply(ToolStarted(0, "a", "slow", {}))
    assert c.cancel("stopped by user") is True
    snap = c.snapshot()
    assert snap.status is TurnStatus.CANCELLED
    assert snap.error == "stopped by user"
    assert snap.blocks[1]["status"] == "failed"
    assert snap.answer_text() == "partial"
    assert c.apply(ToolFinished(0, "a", True)) is False


def test_fail_records_the_error():
    c = make()
    assert c.fail("provider unavailable") is True
    assert c.snapshot().to_dict()["status"] == "failed"
    assert c.snapshot().error == "provider unavailable"


@pytest.mark.parametrize(
    "events",
    [
        [ToolStarted(0, "a", "x", {}), ToolStarted(0, "a", "x", {})],
        [ToolFinished(0, "missing", True)],
        [ToolStarted(0, "a", "x", {}), ToolFinished(0, "a", True), ToolFinished(0, "a", True)],
        [ToolStarted(0, "", "x", {})],
        [TextDelta(0, b"bytes")],  # type: ignore[arg-type]
        [PhaseChanged("sleeping")],
    ],
)
def test_impossible_events_raise_and_change_nothing(events):
    c = make()
    *ok, bad = events
    for event in ok:
        c.apply(event)
    before = c.revision
    with pytest.raises(TurnEventError):
        c.apply(bad)
    assert c.revision == before


def test_a_non_event_raises():
    with pytest.raises(TurnEventError):
        make().apply("hello")  # type: ignore[arg-type]


def test_tool_arguments_are_copied_so_later_mutation_does_not_leak():
    c = make()
    args = {"q": ["a"]}
    c.apply(ToolStarted(0, "a", "x", args))
    args["q"].append("b")
    assert c.snapshot().blocks[0]["arguments"] == {"q": ["a"]}


def test_long_previews_are_cut():
    c = make()
    c.apply(ToolStarted(0, "a", "cat", {}))
    c.apply(ToolFinished(0, "a", True, "x" * (MAX_PREVIEW_CHARS + 50)))
    preview = c.snapshot().blocks[0]["preview"]
    assert len(preview) == MAX_PREVIEW_CHARS and preview.endswith("…")


def test_snapshots_are_cached_per_revision_and_old_ones_do_not_change():
    c = make()
    c.apply(TextDelta(0, "a"))
    first = c.snapshot()
    assert c.snapshot() is first
    c.apply(TextDelta(0, "b"))
    second = c.snapshot()
    assert second is not first
    assert first.blocks[0]["text"] == "a"
    assert second.blocks[0]["text"] == "ab"


def test_to_dict_returns_copies_the_caller_may_change():
    c = make()
    c.apply(TextDelta(0, "a"))
    turn = c.snapshot().to_dict()
    turn["blocks"][0]["text"] = "mutated"
    assert c.snapshot().blocks[0]["text"] == "a"
    json.dumps(turn)


def test_unchanged_blocks_are_reused_between_snapshots():
    c = make()
    c.apply(ReasoningDelta(0, "r"))
    c.apply(TextDelta(0, "a"))
    first = c.snapshot()
    c.apply(TextDelta(0, "b"))
    assert c.snapshot().blocks[0] is first.blocks[0]


def test_apply_never_materialises_a_snapshot(monkeypatch):
    c = make()

    def boom():
        raise AssertionError("snapshot() called on the delta path")

    monkeypatch.setattr(c, "snapshot", boom)
    for i in range(50):
        c.apply(ReasoningDelta(0, "r"))
        c.apply(TextDelta(i // 10, "t"))
    c.apply(ToolStarted(9, "a", "x", {}))
    c.apply(ToolFinished(9, "a", True))
    c.complete()


def test_deltas_only_append_parts_until_a_snapshot_joins_them():
    c = make()
    for _ in range(1000):
        c.apply(TextDelta(0, "x"))
    block = c._blocks[-1]
    assert len(block.parts) == 1000, "one append per delta, no join on the delta path"
    assert c.snapshot().blocks[0]["text"] == "x" * 1000
    assert len(block.parts) == 1
    c.apply(TextDelta(0, "y"))
    assert len(block.parts) == 2


def test_a_snapshot_shows_non_object_arguments_as_an_empty_object_and_bounds_large_ones():
    controller = TurnController("t1", "cli_chat:u1:d1", "m1")
    controller.apply(ToolStarted(0, "c1", "search", "{not json"))
    controller.apply(ToolStarted(0, "c2", "search", {"query": "q" * 10_000}))
    controller.apply(ToolStarted(0, "c3", "search", {"query": "fine"}))
    blocks = controller.snapshot().to_dict()["blocks"]
    size = len(json.dumps({"query": "q" * 10_000}, separators=(",", ":")).encode())
    assert size > MAX_ARGUMENTS_BYTES
    assert [b["arguments"] for b in blocks] == [{}, {"_truncated": f"{size} bytes"}, {"query": "fine"}]
    assert len(serialize_snapshot(controller.snapshot(), PresentationPolicy.websocket())) < 2000
