"""Property tests for TurnController over arbitrary valid event sequences (seed 003 §19.2)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from delivery.events import (
    PhaseChanged,
    ReasoningDelta,
    TextDelta,
    TextSegmentFinished,
    ToolFinished,
    ToolStarted,
)
from delivery.presentation import PresentationPolicy, ReasoningVisibility, ToolVisibility, serialize_snapshot
from delivery.snapshot import TurnPhase
from delivery.turn import TurnController

TURN_KEYS = {"id", "session_id", "message_id", "revision", "status", "phase", "blocks", "usage", "error"}
deltas = st.text(alphabet=st.sampled_from("ab \n界😀"), max_size=4)


@st.composite
def turn_scripts(draw):
    """A list of ops: events in a valid order, lifecycle calls, and late events after the end."""
    ops: list[tuple] = []
    iteration = 0
    running: list[str] = []
    started = 0
    for _ in range(draw(st.integers(0, 60))):
        kind = draw(
            st.sampled_from(
                [
                    "reasoning",
                    "text",
                    "text",
                    "segment",
                    "next_iteration",
                    "tool_start",
                    "tool_finish",
                    "phase",
                ]
                + ["finalizing", "terminal"]
            )
        )
        if kind == "next_iteration":
            iteration += 1
        elif kind == "reasoning":
            ops.append(("event", ReasoningDelta(iteration, draw(deltas))))
        elif kind == "text":
            ops.append(("event", TextDelta(iteration, draw(deltas))))
        elif kind == "segment":
            ops.append(("event", TextSegmentFinished(iteration)))
        elif kind == "tool_start":
            call_id = f"call_{started}"
            started += 1
            running.append(call_id)
            ops.append(("event", ToolStarted(iteration, call_id, "tool", {"n": started})))
        elif kind == "tool_finish" and running:
            call_id = running.pop(draw(st.integers(0, len(running) - 1)))
            ops.append(
                ("event", ToolFinished(iteration, call_id, draw(st.booleans()), draw(st.none() | deltas)))
            )
        elif kind == "phase":
            ops.append(("event", PhaseChanged(draw(st.sampled_from(list(TurnPhase))))))
        elif kind == "finalizing":
            ops.append(("finalizing",))
        elif kind == "terminal":
            ops.append(("terminal", draw(st.sampled_from(["complete", "cancel", "fail"]))))
    return ops


def run_op(c: TurnController, op: tuple) -> bool:
    if op[0] == "event":
        return c.apply(op[1])
    if op[0] == "finalizing":
        return c.begin_finalizing()
    return {
        "complete": lambda: c.complete({"t": 1}),
        "cancel": lambda: c.cancel(None),
        "fail": lambda: c.fail("x"),
    }[op[1]]()


@settings(max_examples=300, deadline=None)
@given(turn_scripts())
def test_reducer_invariants_hold_for_any_valid_event_sequence(ops):
    c = TurnController("t", "s", "m")
    revision = c.revision
    expected_text = {"assistant": [], "reasoning": []}
    spans: dict[int, list[int]] = {}  # block index -> [first op index, last op index]
    segment_ops: list[int] = []
    final = None
    for i, op in enumerate(ops):
        was_terminal = c.is_terminal
        changed = run_op(c, op)
        # Revisions strictly increase on every change and only then.
        assert c.revision == (revision + 1 if changed else revision)
        revision = c.revision
        if was_terminal:
            assert not changed
            assert c.snapshot() is final, "a terminal turn never changes"
            continue
        if c.is_terminal:
            final = c.snapshot()
        if op[0] != "event":
            continue
        event = op[1]
        if isinstance(event, TextSegmentFinished):
            segment_ops.append(i)
        if isinstance(event, TextDelta | ReasoningDelta) and event.delta:
            assert changed
            expected_text["assistant" if isinstance(event, TextDelta) else "reasoning"].append(event.delta)
            index = len(c.snapshot().blocks) - 1
            spans.setdefault(index, [i, i])[1] = i

    snap = c.snapshot()
    blocks = snap.blocks
    for kind in ("assistant", "reasoning"):
        assert "".join(b["text"] for b in blocks if b["type"] == kind) == "".join(expected_text[kind])
    assert all(b["text"] for b in blocks if b["type"] != "tool"), "no empty text blocks"
    for a, (left, right) in enumerate(zip(blocks, blocks[1:], strict=False)):
        if left["type"] == right["type"] != "tool" and left["iteration"] == right["iteration"]:
            # Only a segment boundary between the two may separate them.
            assert left["type"] == "assistant"
            assert any(spans[a][1] < s < spans[a + 1][0] for s in segment_ops)
    tool_ids = [b["id"] for b in blocks if b["type"] == "tool"]
    assert len(tool_ids) == len(set(tool_ids))
    assert len({b["id"] for b in blocks}) == len(blocks)
    if snap.is_terminal:
        assert all(b["status"] != "running" for b in blocks if b["type"] == "tool")
    turn = json.loads(json.dumps(snap.to_dict()))
    assert TURN_KEYS <= set(turn) <= TURN_KEYS | {"empty_answer"}


@settings(max_examples=100, deadline=None)
@given(turn_scripts())
def test_the_delta_path_never_builds_a_snapshot(ops):
    c = TurnController("t", "s", "m")
    calls = []
    c.snapshot = lambda: calls.append(1)  # type: ignore[method-assign]
    for op in ops:
        run_op(c, op)
    assert calls == []


@settings(max_examples=100, deadline=None)
@given(st.lists(deltas, max_size=200))
def test_per_delta_work_is_one_append_whatever_the_turn_length(parts):
    c = TurnController("t", "s", "m")
    appended = 0
    for part in parts:
        before = sum(len(b.parts) for b in c._blocks if hasattr(b, "parts"))
        c.apply(TextDelta(0, part))
        after = sum(len(b.parts) for b in c._blocks if hasattr(b, "parts"))
        assert after - before == (1 if part else 0)
        appended += after - before
    assert appended == sum(1 for p in parts if p)


POLICIES = [
    PresentationPolicy(reasoning, tools) for reasoning in ReasoningVisibility for tools in ToolVisibility
]


def committed_runs(ops: list[tuple]) -> list[str]:
    """An independent model of history: one assistant message per run of text deltas.

    A run ends at an iteration change, a ``TextSegmentFinished`` or a tool call (the agent loop
    commits one assistant message per model response); reasoning inside a run does not end it.
    """
    runs: list[list] = []  # [iteration, text, open]
    for op in ops:
        if op[0] == "terminal":
            break
        if op[0] != "event":
            continue
        event = op[1]
        if isinstance(event, TextSegmentFinished | ToolStarted):
            if runs:
                runs[-1][2] = False
        elif isinstance(event, TextDelta) and event.delta:
            if runs and runs[-1][2] and runs[-1][0] == event.iteration:
                runs[-1][1] += event.delta
            else:
                runs.append([event.iteration, event.delta, True])
    return [text for _, text, _ in runs]


@settings(max_examples=300, deadline=None)
@given(turn_scripts())
def test_every_presented_view_keeps_the_rules_and_the_committed_answer(ops):
    c = TurnController("t", "s", "m")
    for op in ops:
        run_op(c, op)
    snap = c.snapshot()
    runs = committed_runs(ops)
    expected = "\n\n".join(runs)
    assert snap.answer_text() == expected
    reasoning = "".join(b["text"] for b in snap.blocks if b["type"] == "reasoning")
    for policy in POLICIES:
        view = policy.present(snap)
        blocks = view.blocks
        assert view.answer_text() == expected, "the fallback text equals what history commits"
        assert len(view.segments) == len(blocks)
        for (left, ls), (right, rs) in zip(
            zip(blocks, view.segments, strict=True),
            zip(blocks[1:], view.segments[1:], strict=True),
            strict=False,
        ):
            mergeable = left["type"] == right["type"] != "tool" and left["iteration"] == right["iteration"]
            assert not (mergeable and ls == rs), "no two adjacent mergeable blocks after filtering"
        kinds = {b["type"] for b in blocks}
        if policy.reasoning is ReasoningVisibility.HIDDEN:
            assert "reasoning" not in kinds
            # Only reasoning can split a run, so with it hidden each message is one block.
            assert [b["text"] for b in blocks if b["type"] == "assistant"] == runs
        else:
            assert "".join(b["text"] for b in blocks if b["type"] == "reasoning") == reasoning
        if policy.tools is ToolVisibility.HIDDEN:
            assert "tool" not in kinds
        assert view.to_dict() == json.loads(serialize_snapshot(view, policy))
        assert snap.blocks == c.snapshot().blocks, "presenting never changes the turn"
