"""Every invariant check of the matrix can fail: each passes on a healthy observation and fails on
the one breach it is about (and on an observation that never exercised it)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from tests.faults.invariants import CHECKS, INTERRUPTED_ERROR, Observation, Sent

TURN, REPLY, INBOX = "t-1", "r-1", "u-1"


def healthy() -> Observation:
    """One message, one tool round trip, committed (stamp 1), then shown completed (stamp 2)."""
    final = {
        "type": "turn_updated",
        "turn": {"id": TURN, "message_id": REPLY, "status": "completed", "error": None},
    }
    committed = {
        "type": "turn_committed",
        "messages": [{"id": INBOX, "role": "user"}, {"id": REPLY, "role": "assistant"}],
    }
    request = [
        {"role": "user", "text": "hi", "calls": [], "result_for": None},
        {"role": "assistant", "text": "", "calls": ["c1"], "result_for": None},
        {"role": "tool", "text": "", "calls": [], "result_for": "c1"},
    ]
    return Observation(
        sent=[Sent("m-1", "hi", watcher=0)],
        frames=[[(2, final), (3, committed)]],
        commits=[(1, INBOX)],
        inbox=[
            {
                "id": INBOX,
                "client_msg_id": "m-1",
                "turn_id": TURN,
                "reply_message_id": REPLY,
                "status": "done",
                "outcome": "completed",
                "content": "hi",
            }
        ],
        messages=[
            {"id": INBOX, "seq": 1, "role": "user", "content": "hi", "completion_status": "completed",
             "tool_calls": [], "tool_call_id": None},
            {"id": "a-1", "seq": 2, "role": "assistant", "content": "", "completion_status": "completed",
             "tool_calls": ["c1"], "tool_call_id": None},
            {"id": "x-1", "seq": 3, "role": "tool", "content": "42", "completion_status": "completed",
             "tool_calls": [], "tool_call_id": "c1"},
            {"id": REPLY, "seq": 4, "role": "assistant", "content": "42.", "completion_status": "completed",
             "tool_calls": [], "tool_call_id": None},
        ],
        requests=[request[:1], request],
        running_after=[],
        bounds={"peak": (10, 100)},
    )  # fmt: skip


def final_before_commit(obs: Observation) -> None:
    obs.commits = [(5, INBOX)]


def final_twice(obs: Observation) -> None:
    obs.frames[0].append((4, copy.deepcopy(obs.frames[0][0][1])))


def user_row_twice(obs: Observation) -> None:
    obs.messages.append({**obs.messages[0], "id": "u-2", "seq": 5})


def orphaned_call(obs: Observation) -> None:
    obs.requests.append(
        obs.requests[1][:2] + [{"role": "user", "text": "next", "calls": [], "result_for": None}]
    )


def left_started(obs: Observation) -> None:
    obs.inbox[0]["status"] = "started"


def falsely_interrupted(obs: Observation) -> None:
    obs.frames[0][0][1]["turn"].update(status="failed", error=INTERRUPTED_ERROR)
    obs.inbox[0].update(status="interrupted", outcome="failed")


def over_bound(obs: Observation) -> None:
    obs.bounds["peak"] = (101, 100)


def never_exercised(invariant: str) -> Callable[[Observation], None]:
    def breach(obs: Observation) -> None:
        if invariant == "completed_only_after_commit":
            obs.frames[0][0][1]["turn"]["status"] = "failed"
            obs.inbox[0]["outcome"] = "failed"
        elif invariant == "no_orphaned_tool_call":
            obs.requests = [obs.requests[0]]
            obs.messages = [obs.messages[0], obs.messages[3]]
        elif invariant == "memory_bounded":
            obs.bounds = {}
        elif invariant == "no_turn_left_running":
            obs.inbox = []
        else:
            obs.sent = []

    return breach


BREACHES = {
    "completed_only_after_commit": final_before_commit,
    "one_final": final_twice,
    "no_duplicate_user_message": user_row_twice,
    "no_orphaned_tool_call": orphaned_call,
    "no_turn_left_running": left_started,
    "no_false_interrupted": falsely_interrupted,
    "memory_bounded": over_bound,
}


@pytest.mark.parametrize("invariant", list(CHECKS))
def test_each_check_passes_on_a_healthy_run_and_fails_on_its_breach(invariant: str):
    CHECKS[invariant](healthy())
    broken = healthy()
    BREACHES[invariant](broken)
    with pytest.raises(AssertionError):
        CHECKS[invariant](broken)


@pytest.mark.parametrize(
    "invariant", ["completed_only_after_commit", "one_final", "no_orphaned_tool_call", "no_turn_left_running",
                  "memory_bounded"],
)  # fmt: skip
def test_a_check_whose_subject_never_happened_fails(invariant: str):
    broken = healthy()
    never_exercised(invariant)(broken)
    with pytest.raises(AssertionError):
        CHECKS[invariant](broken)


def test_a_killed_turn_must_be_reported_interrupted():
    obs = healthy()
    obs.killed_turns = {TURN}
    obs.inbox[0].update(status="interrupted", outcome="failed")
    with pytest.raises(AssertionError, match="never reported interrupted"):
        CHECKS["no_false_interrupted"](obs)
    obs.frames[0][0][1]["turn"].update(status="failed", error=INTERRUPTED_ERROR)
    CHECKS["no_false_interrupted"](obs)
