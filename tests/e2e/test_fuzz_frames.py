"""10 000 random and mutated frames against the real ``serve`` (issue 16, "Fuzzing"; "Must show" 6).

Two users (alice and bob, API tokens) each keep one WebSocket open; hypothesis draws the frames
(``frame_fuzz.raw_frames``: mutated valid frames of every PROTOCOL §1 client type, random JSON
and text, broken and oversized JSON, binary frames, the other user's ids), and they go out in
batches of ``BATCH`` per user, each batch closed by a ``ping`` whose ``pong`` says the server
has answered everything before it. Asserted throughout: no ``internal_error`` frame, no close,
no traceback in the server's output, neither user ever shown the other's secret marker or
server-assigned ids; afterwards: the server still answers (health, new sockets, a new turn),
neither user's dialogs or history hold the other's marker, and the server's resident memory
grew by less than ``RSS_GROWTH_BOUND`` from the warmed-up point. The figures are printed and
written to the artefacts directory.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.e2e.artefacts import write_json
from tests.e2e.frame_fuzz import KnownIds, leaks, raw_frames
from tests.e2e.serve_process import ServeProcess, manage

pytestmark = pytest.mark.e2e

FRAMES = 10_000
BATCH = 50
WARM_UP_FRAMES = 1_000  # RSS is compared from here (caches, pools and code paths warmed)
RSS_GROWTH_BOUND = 64 * 1024 * 1024
RECV_TIMEOUT = 60.0
SEED_POLLS = 200  # ping/pong rounds a seeded message may take to start its turn


def rss_bytes(pid: int) -> int:
    """The process's resident set size (``/proc/PID/status`` VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class FuzzedUser:
    """One user's socket, ids, secret marker, and what its frames got back."""

    def __init__(self, name: str, token: str, ws_url: str) -> None:
        self.name = name
        self.token = token
        self.ws_url = ws_url
        self.marker = f"{name.upper()}-{uuid.uuid4().hex}"
        self.ids = KnownIds()
        self.pending: list[str | bytes] = []
        self.answers: Counter[str] = Counter()
        self.ws: ClientConnection = self.open()

    def open(self) -> ClientConnection:
        ws = connect(
            self.ws_url,
            additional_headers={"Authorization": f"Bearer {self.token}"},
            max_size=16 * 1024 * 1024,
            ping_interval=None,  # its pings draw from the global random: hypothesis would object,
        )
        ready = json.loads(ws.recv(timeout=RECV_TIMEOUT))
        assert ready["type"] == "ready", ready
        self.ids.learn(ready)
        return ws

    def exchange(self, frames: list[str | bytes], other: FuzzedUser) -> list[dict]:
        """Send ``frames`` then a ping; returns every frame received up to its pong (checked)."""
        nonce = uuid.uuid4().hex
        received: list[dict] = []
        try:
            for frame in frames:
                self.ws.send(frame)
            self.ws.send(json.dumps({"type": "ping", "nonce": nonce}))
            while True:
                frame = json.loads(self.ws.recv(timeout=RECV_TIMEOUT))
                received.append(frame)
                if frame.get("type") == "pong" and frame.get("nonce") == nonce:
                    break
        except ConnectionClosed as exc:
            raise AssertionError(f"{self.name}'s socket closed ({exc}) after the batch {frames!r}") from exc
        for frame in received:
            kind = frame["type"] if frame["type"] != "error" else f"error:{frame.get('code')}"
            self.answers[kind] += 1
            assert kind != "error:internal_error", (frame, frames)
            shown = leaks(frame, other.ids, other.marker)
            assert shown == [], f"{self.name} was shown {other.name}'s data: {shown} in {frame}"
            if frame["type"] != "error":
                self.ids.learn(frame)
        return received

    def seed(self, other: FuzzedUser) -> None:
        """Two dialogs with a committed turn each, all carrying the secret marker."""
        for title in ("first", "second"):
            self.exchange([json.dumps({"type": "message", "content": f"/new {self.marker} {title}"})], other)
            sent = json.dumps(
                {"type": "message", "content": f"{self.marker} hello", "client_msg_id": str(uuid.uuid4())}
            )
            self.exchange([sent], other)
            for _ in range(SEED_POLLS):
                if self.ids.turn_ids:
                    break
                self.exchange([], other)
            else:
                raise AssertionError(f"{self.name}: no turn started for a message (answers: {self.answers})")


def fuzz(alice: FuzzedUser, bob: FuzzedUser, on_warm: Any) -> int:
    """Draw FRAMES frames with hypothesis and send them in batches; returns how many were sent."""
    users = {"alice": (alice, bob), "bob": (bob, alice)}
    sent = 0

    def flush(user: FuzzedUser, other: FuzzedUser) -> None:
        nonlocal sent
        batch, user.pending = user.pending, []
        user.exchange(batch, other)
        before, sent = sent, sent + len(batch)
        if before < WARM_UP_FRAMES <= sent:
            on_warm()

    @settings(
        max_examples=FRAMES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],  # no shrinking against a live server: the batch is in the message
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def one_frame(data: st.DataObject) -> None:
        user, other = users[data.draw(st.sampled_from(sorted(users)), label="user")]
        user.pending.append(data.draw(raw_frames(user.ids, other.ids, user.marker), label="frame"))
        if len(user.pending) >= BATCH:
            flush(user, other)

    one_frame()
    for user, other in users.values():
        if user.pending:
            flush(user, other)
    return sent


def still_answering(url: str, alice: FuzzedUser, bob: FuzzedUser) -> None:
    """Health answers 200; each user opens a fresh socket and runs a new turn to its end."""
    with urllib.request.urlopen(url + "api/health", timeout=30) as health:
        assert health.status == 200
    for user, other in ((alice, bob), (bob, alice)):
        user.ws.close()
        user.ws = user.open()
        user.ids.turn_ids.clear()
        user.seed(other)
        user.ws.close()


def foreign_rows(db: Path, owner: str, marker: str) -> list[tuple]:
    """``owner``'s dialog titles and history rows that hold ``marker`` (from the server's SQLite)."""
    with sqlite3.connect(db) as conn:
        owned = "SELECT d.id FROM conversations_dialog d JOIN auth_user u ON u.id = d.owner_id WHERE u.username = ?"
        titles = conn.execute(
            f"SELECT id, title FROM conversations_dialog WHERE id IN ({owned}) AND instr(title, ?) > 0",
            (owner, marker),
        )
        rows = conn.execute(
            f"SELECT id, content FROM conversations_message WHERE dialog_id IN ({owned}) AND instr(content, ?) > 0",
            (owner, marker),
        )
        return titles.fetchall() + rows.fetchall()


async def test_ten_thousand_random_and_mutated_frames_break_nothing_and_leak_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    env = {
        "PICOBOT_REPLAY_EVENT_DELAY": "0",
        "PICOBOT_AUTO_TITLE_AFTER": "0",
        "PICOBOT_INBOX_CAPACITY": "4",
        # Thousands of message frames a minute: the per-user rate (tested on its own) would refuse
        # the later ones, and the turns that show the server still answers.
        "PICOBOT_USER_MESSAGES_PER_MINUTE": "0",
    }
    server = ServeProcess(data_dir, env)
    await server.start()
    try:
        tokens = {}
        for name in ("alice", "bob"):
            created = await asyncio.to_thread(manage, data_dir, "createtoken", name)
            tokens[name] = created.strip().splitlines()[-1]
        assert server.proc is not None
        pid = server.proc.pid
        alice = FuzzedUser("alice", tokens["alice"], server.ws_url)
        bob = FuzzedUser("bob", tokens["bob"], server.ws_url)
        await asyncio.to_thread(alice.seed, bob)
        await asyncio.to_thread(bob.seed, alice)
        rss: dict[str, int] = {"start": rss_bytes(pid)}
        sent = await asyncio.to_thread(fuzz, alice, bob, lambda: rss.setdefault("warm", rss_bytes(pid)))
        rss["end"] = rss_bytes(pid)

        await asyncio.to_thread(still_answering, server.url, alice, bob)
        db = data_dir / "picobot.sqlite3"
        assert foreign_rows(db, "alice", bob.marker) == []
        assert foreign_rows(db, "bob", alice.marker) == []
        assert foreign_rows(db, "alice", alice.marker) != []  # the check can see a marker
    finally:
        await server.stop()
    output = "".join(server.output)
    figures = {
        "frames_sent": sent,
        "failures": 0,
        "rss_mib": {k: round(v / 2**20, 1) for k, v in rss.items()},
        "answers": {"alice": dict(alice.answers), "bob": dict(bob.answers)},
    }
    print(json.dumps(figures, indent=1))
    write_json("fuzz-frames", figures)
    assert sent == FRAMES
    assert "Traceback" not in output, output[-5000:]
    assert rss["end"] - rss["warm"] < RSS_GROWTH_BOUND, figures
