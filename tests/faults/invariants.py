"""What a fault scenario observed (``Observation``) and the checks of ``catalog.INVARIANTS`` on it.

Every check asserts something the scenario really exercised: it fails when its subject is
missing (no completed turn, no tool call in any request, no bound measured), so no cell is true
by default. Pure module: the scenarios collect the rows and frames; nothing here reads a database.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

INTERRUPTED_NOTICE_START = "Your last turn was interrupted by a server restart"
"""``runtime.notify.INTERRUPTED_NOTICE``'s opening words (the restart notice)."""
INTERRUPTED_ERROR = "interrupted by a server restart"
"""``storage.shapes.TURN_INTERRUPTED_ERROR``: a dead process's turn, as its final shows it."""


@dataclass(frozen=True)
class Sent:
    """A user message the scenario sent: its ``client_msg_id``, ``content``, and the index of the
    client that must show its turn's final (``watcher``; after a restart, the new connection)."""

    client_msg_id: str
    content: str
    watcher: int


@dataclass
class Observation:
    """Everything a scenario saw, in plain data (dicts as the protocol and the rows have them).

    Attributes:
        sent: the messages sent (a message sent twice with one ``client_msg_id`` is listed once).
        frames: per client, ``(stamp, frame)`` in the order received; stamps share one counter
            with ``commits``.
        commits: ``(stamp, inbox_id)`` when a commit transaction of that turn returned; None when
            the server ran in another process (then the rows alone are evidence).
        inbox: the inbox rows: ``id, client_msg_id, turn_id, reply_message_id, status, outcome, content``.
        messages: the history rows in ``seq`` order: ``id, seq, role, content, turn_id,
            completion_status, tool_calls`` (ids), ``tool_call_id``.
        requests: per provider request, its messages: ``role``, ``text`` (user text without the
            runtime context), ``calls`` (tool call ids), ``result_for`` (a tool message's call id).
        running_after: ``ready.running`` of a connection made after the fault settled.
        killed_turns: turn ids whose process the fault killed (the only ones that may be interrupted).
        bounds: name → ``(measured, limit)``: memory and queue sizes.
    """

    sent: list[Sent] = field(default_factory=list)
    frames: list[list[tuple[int, dict]]] = field(default_factory=list)
    commits: list[tuple[int, str]] | None = None
    inbox: list[dict] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)
    requests: list[list[dict]] = field(default_factory=list)
    running_after: list[dict] = field(default_factory=list)
    killed_turns: set[str] = field(default_factory=set)
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)

    def inbox_of(self, sent: Sent) -> dict:
        rows = [row for row in self.inbox if row["client_msg_id"] == sent.client_msg_id]
        assert len(rows) == 1, f"{sent.client_msg_id!r} has {len(rows)} inbox rows (acknowledged: one)"
        return rows[0]


def terminal_frames(frames: list[tuple[int, dict]], turn_id: str | None = None) -> list[tuple[int, dict]]:
    """The terminal ``turn_updated`` frames (of ``turn_id``), with their stamps."""
    return [
        (stamp, frame)
        for stamp, frame in frames
        if frame["type"] == "turn_updated"
        and frame["turn"]["status"] != "running"
        and (turn_id is None or frame["turn"]["id"] == turn_id)
    ]


def completed_only_after_commit(obs: Observation) -> None:
    by_turn = {row["turn_id"]: row for row in obs.inbox if row["turn_id"]}
    rows = {row["id"]: row for row in obs.messages}
    completed = [
        (stamp, frame["turn"])
        for client in obs.frames
        for stamp, frame in terminal_frames(client)
        if frame["turn"]["status"] == "completed"
    ]
    assert completed, "no turn completed: the scenario did not exercise the rule"
    for stamp, turn in completed:
        row = by_turn.get(turn["id"])
        assert row is not None, f"turn {turn['id']} was shown completed but has no inbox row"
        assert (row["status"], row["outcome"]) == ("done", "completed"), (
            f"turn {turn['id']} was shown completed but its inbox row is {row['status']}/{row['outcome']}"
        )
        reply = rows.get(turn["message_id"])
        assert reply is not None and reply["completion_status"] == "completed", (
            f"turn {turn['id']} was shown completed but its answer row is {reply}"
        )
        if obs.commits is not None:
            committed_at = [at for at, inbox_id in obs.commits if inbox_id == row["id"]]
            assert committed_at and min(committed_at) < stamp, (
                f"turn {turn['id']}: the completed final arrived before its commit returned"
            )


def one_final(obs: Observation) -> None:
    assert obs.sent, "no message was sent"
    for sent in obs.sent:
        turn_id = obs.inbox_of(sent)["turn_id"]
        assert turn_id, f"{sent.client_msg_id!r} never started a turn"
        finals = terminal_frames(obs.frames[sent.watcher], turn_id)
        assert len(finals) == 1, (
            f"{sent.client_msg_id!r}: {len(finals)} terminal snapshots on its client "
            f"({[f['turn']['status'] for _, f in finals]})"
        )
        fallbacks = [
            frame
            for _, frame in obs.frames[sent.watcher]
            if frame["type"] == "notification" and frame.get("id") == f"{turn_id}:fallback"
        ]
        assert not fallbacks, f"{sent.client_msg_id!r}: a plain fallback beside the final"
    for index, client in enumerate(obs.frames):
        shown = Counter(frame["turn"]["id"] for _, frame in terminal_frames(client))
        twice = [turn for turn, count in shown.items() if count > 1]
        assert not twice, f"client {index} got the final of {twice} more than once"


def no_duplicate_user_message(obs: Observation) -> None:
    users = [row for row in obs.messages if row["role"] == "user"]
    assert sorted(row["content"] for row in users) == sorted(s.content for s in obs.sent), (
        f"history's user messages {[row['content'] for row in users]} are not those sent, once each"
    )
    inbox_ids = {obs.inbox_of(s)["id"] for s in obs.sent}
    assert {row["id"] for row in users} == inbox_ids, "a user row is not its inbox row"
    assert len(obs.inbox) == len(obs.sent), f"{len(obs.inbox)} inbox rows for {len(obs.sent)} messages"
    for index, client in enumerate(obs.frames):
        committed = Counter(
            message["id"]
            for _, frame in client
            if frame["type"] == "turn_committed"
            for message in frame["messages"]
            if message["role"] == "user"
        )
        again = [message_id for message_id, count in committed.items() if count > 1]
        assert not again, f"client {index}: user message(s) {again} in two turn_committed frames"
    assert obs.requests, "no provider request was made"
    for number, request in enumerate(obs.requests):
        texts = Counter(m["text"] for m in request if m["role"] == "user")
        assert all(count == 1 for count in texts.values()), (
            f"request {number} repeats a user message: {texts}"
        )


def _orphans(messages: list[dict]) -> tuple[int, list[str]]:
    """(calls seen, problems) of one request or of the history, in order."""
    pending: list[str] = []
    calls = 0
    problems = []
    for message in messages:
        if message["role"] == "assistant":
            if pending:
                problems.append(f"calls {pending} have no result before the next assistant message")
            pending = list(message["calls"])
            calls += len(pending)
        elif message["role"] == "tool":
            if message["result_for"] in pending:
                pending.remove(message["result_for"])
            else:
                problems.append(f"result for unknown call {message['result_for']!r}")
        elif pending:
            problems.append(f"calls {pending} have no result before a {message['role']} message")
            pending = []
    if pending:
        problems.append(f"calls {pending} have no result")
    return calls, problems


def no_orphaned_tool_call(obs: Observation) -> None:
    calls = 0
    for number, request in enumerate(obs.requests):
        seen, problems = _orphans(request)
        calls += seen
        assert not problems, f"request {number}: {problems}"
    history = [
        {"role": row["role"], "calls": row["tool_calls"], "result_for": row["tool_call_id"]}
        for row in obs.messages
    ]
    seen, problems = _orphans(history)
    assert not problems, f"history: {problems}"
    assert calls and seen, "no tool call reached a request and the history: the rule was not exercised"


def no_turn_left_running(obs: Observation) -> None:
    assert obs.inbox, "no inbox row: nothing ran"
    left = [
        (row["client_msg_id"], row["status"]) for row in obs.inbox if row["status"] in ("queued", "started")
    ]
    assert not left, f"left running or queued after the fault settled: {left}"
    assert obs.running_after == [], f"a new connection is shown running turns: {obs.running_after}"


def no_false_interrupted(obs: Observation) -> None:
    interrupted = {row["turn_id"] for row in obs.inbox if row["status"] == "interrupted"}
    assert interrupted == obs.killed_turns, (
        f"interrupted: {sorted(interrupted)}; killed with their process: {sorted(obs.killed_turns)}"
    )
    for row in obs.inbox:
        if row["turn_id"] not in obs.killed_turns:
            assert row["status"] == "done" and row["outcome"] in ("completed", "failed", "cancelled"), (
                f"{row['client_msg_id']!r} ended {row['status']}/{row['outcome']}"
            )
    for index, client in enumerate(obs.frames):
        notices = [
            frame
            for _, frame in client
            if frame["type"] == "notification" and frame["content"].startswith(INTERRUPTED_NOTICE_START)
        ]
        for frame in notices:
            assert frame.get("turn_id") in obs.killed_turns, f"client {index}: a false restart notice"
        for turn_id in obs.killed_turns:  # a notice may arrive twice, always with its one id (PROTOCOL §1)
            ids = {frame.get("id") for frame in notices if frame.get("turn_id") == turn_id}
            assert len(ids) <= 1, f"client {index}: restart notices of {turn_id} with ids {ids}"
        for _, frame in terminal_frames(client):
            if INTERRUPTED_ERROR in (frame["turn"].get("error") or ""):
                assert frame["turn"]["id"] in obs.killed_turns, f"client {index}: a false interrupted final"
    for turn_id in obs.killed_turns:
        told = [
            frame
            for client in obs.frames
            for _, frame in terminal_frames(client, turn_id)
            if INTERRUPTED_ERROR in (frame["turn"].get("error") or "")
        ]
        assert told, f"the killed turn {turn_id} was never reported interrupted"


def memory_bounded(obs: Observation) -> None:
    assert obs.bounds, "nothing was measured"
    over = {name: value for name, value in obs.bounds.items() if value[0] > value[1]}
    assert not over, f"over their bounds (measured, limit): {over}"


CHECKS: dict[str, Callable[[Observation], None]] = {
    "completed_only_after_commit": completed_only_after_commit,
    "one_final": one_final,
    "no_duplicate_user_message": no_duplicate_user_message,
    "no_orphaned_tool_call": no_orphaned_tool_call,
    "no_turn_left_running": no_turn_left_running,
    "no_false_interrupted": no_false_interrupted,
    "memory_bounded": memory_bounded,
}
