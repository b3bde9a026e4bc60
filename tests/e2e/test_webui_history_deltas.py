"""History deltas in the WebUI's protocol state (seed 000 §11), in Chromium.

``static/picobot/protocol.js``'s ``ChatStore`` is the WebUI's client logic with no DOM: a
``turn_committed`` that continues the revision is merged, a duplicate changes nothing, and a
client that missed one detects the gap and asks for the full history exactly once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.serve_process import REPO

pytestmark = pytest.mark.e2e

SESSION = "cli_chat:1:abcd1234"


def row(seq: int, role: str = "user") -> dict:
    return {
        "id": f"m{seq}",
        "seq": seq,
        "role": role,
        "content": f"row {seq}",
        "turn_id": f"t{(seq + 1) // 2}",
        "created_at": 1_764_400_000_000 + seq,
    }


def committed(*seqs: int) -> dict:
    return {
        "type": "turn_committed",
        "session_id": SESSION,
        "history_revision": max(seqs),
        "messages": [row(s, "user" if s % 2 else "assistant") for s in seqs],
    }


def history(*seqs: int) -> dict:
    return {
        "type": "session_history",
        "session_id": SESSION,
        "history_revision": max(seqs, default=0),
        "messages": [row(s, "user" if s % 2 else "assistant") for s in seqs],
        "has_more": False,
    }


SCRIPT = """
(frames) => {
  const store = new window.PicoBot.ChatStore();
  const log = [];
  for (const frame of frames) {
    const fx = store.apply(frame);
    const s = store.sessions.get(frame.session_id || frame.active_session_id);
    log.push({
      type: frame.type,
      historyRequests: fx.send.filter((x) => x.type === 'history').length,
      seqs: s ? s.messages.map((m) => m.seq) : [],
      revision: s ? s.revision : null,
      messageCount: (store.dialogs.find((d) => d.session_id === frame.session_id) || {}).message_count,
    });
  }
  return log;
}
"""


async def run_frames(page: Any, frames: list[dict]) -> list[dict]:
    await page.set_content("<!doctype html><title>protocol</title>")
    for name in ("protocol.js", "dialogs.js", "viewmodel.js"):
        await page.add_script_tag(path=str(REPO / "static" / "picobot" / name))
    return await page.evaluate(SCRIPT, json.loads(json.dumps(frames)))


async def test_deltas_merge_duplicates_are_idempotent_and_a_gap_refetches_once(page: Any) -> None:
    frames = [
        {
            "type": "ready",
            "user": "alice",
            "chat_id": "1",
            "active_session_id": SESSION,
            "protocol": 1,
            "provider": {},
            "running": [],
        },
        {
            "type": "sessions",
            "items": [
                {
                    "session_id": SESSION,
                    "dialog_id": "abcd1234",
                    "title": "t",
                    "last_active_at": 0,
                    "message_count": 1,
                    "active": True,
                }
            ],
        },
        history(1, 2),
        committed(3, 4),  # continues revision 2: merged, no history request
        committed(3, 4),  # the same delta again: nothing changes
        committed(7, 8),  # 5–6 were missed: a gap → one history request
        committed(9, 10),  # still waiting for that answer: no second request
        history(*range(1, 11)),  # the full history, once
        committed(11, 12),  # back to deltas
    ]
    log = await run_frames(page, frames)
    by_step = [(e["type"], e["historyRequests"], e["seqs"], e["revision"]) for e in log]
    assert by_step[0] == ("ready", 1, [], 0), "first load asks for history"
    assert by_step[2] == ("session_history", 0, [1, 2], 2)
    assert by_step[3] == ("turn_committed", 0, [1, 2, 3, 4], 4)
    assert by_step[4] == ("turn_committed", 0, [1, 2, 3, 4], 4)
    assert log[4]["messageCount"] == log[3]["messageCount"] == 2, "a duplicate delta is not counted twice"
    assert by_step[5][:2] == ("turn_committed", 1) and 5 not in by_step[5][2]
    assert by_step[6][:2] == ("turn_committed", 0)
    assert by_step[7] == ("session_history", 0, list(range(1, 11)), 10)
    assert by_step[8] == ("turn_committed", 0, list(range(1, 13)), 12)
    assert sum(e["historyRequests"] for e in log) == 2, "full history only on first load and the one gap"
    assert page.errors == []
