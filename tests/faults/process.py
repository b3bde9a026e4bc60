"""The process faults: the real ``serve`` SIGKILLed mid-provider, mid-tool, mid-commit, then restarted.

One flow for the three (``run_killed``), on a fresh data directory (SQLite file):

1. W: a warm-up turn with a ``lookup`` round trip completes (history then holds a tool call);
2. K: the turn the kill hits (streaming a long answer / inside ``slow_tool`` / inside its commit
   transaction, reached through ``serve_plugin``'s hook); Q is acknowledged and queued behind it;
3. SIGKILL; ``serve`` starts again on the same file; a new client connects, K is reported
   interrupted, Q runs (its answer is held until that client is there), K is sent again with
   its ``client_msg_id`` (acknowledged, never run), C runs a ``lookup`` round trip;
4. a last connection's ``ready.running``, the rows read from the file, the provider's requests.

Each server's peak RSS (``VmHWM``) is the memory bound.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

import websockets

from providers.testing import (
    LocalSSEServer,
    RecordedRequest,
    SSEResponse,
    openai_events,
    split_events,
    sse_body,
)
from tests.e2e.serve_process import ServeProcess, manage, openai_env
from tests.e2e.slow_tools import SLOW_TOOL
from tests.e2e.test_restart import WsClient
from tests.faults.invariants import Observation, Sent
from tests.faults.rig import LOOKUP, answer_response, request_messages, user_text
from tests.faults.serve_plugin import PAUSE_FILE_ENV, PAUSE_MARK

WAIT = 60.0
RSS_LIMIT_BYTES = 400 * 1024 * 1024
"""Peak resident memory of one ``serve`` through the scenario (it idles near 100 MiB)."""

WARM = Sent("kill-w", "Warm-up: look it up.", watcher=0)
QUEUED = Sent("kill-q", "Queued behind the killed turn.", watcher=1)
AFTER = Sent("kill-c", "After the restart: look it up.", watcher=1)
KILLED = {
    "process-kill-mid-provider": Sent("kill-k", "Count slowly for me.", watcher=1),
    "process-kill-mid-tool": Sent("kill-k", "Wait in the slow tool.", watcher=1),
    "process-kill-mid-commit": Sent("kill-k", f"Answer, then {PAUSE_MARK}.", watcher=1),
}


def paced(events: list, delay: float = 0.0) -> SSEResponse:
    return SSEResponse(pieces=split_events(sse_body(events)), delay=delay)


def peak_rss(server: ServeProcess) -> int:
    """``VmHWM`` of the server process, in bytes."""
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def _uuid(value: str | None) -> str | None:
    return str(uuid.UUID(value)) if value else None


def read_file_rows(data_dir: Path) -> tuple[list[dict], list[dict]]:
    """``Observation.inbox`` / ``.messages`` from the server's SQLite file."""
    with sqlite3.connect(f"file:{data_dir / 'picobot.sqlite3'}?mode=ro", uri=True, timeout=10) as db:
        inbox = [
            {
                "id": _uuid(row[0]),
                "client_msg_id": row[1],
                "turn_id": _uuid(row[2]),
                "reply_message_id": _uuid(row[3]),
                "status": row[4],
                "outcome": row[5],
                "content": row[6],
            }
            for row in db.execute(
                "SELECT id, client_msg_id, turn_id, reply_message_id, status, outcome, content "
                "FROM conversations_inboxmessage ORDER BY received_at"
            )
        ]
        messages = [
            {
                "id": _uuid(row[0]),
                "seq": row[1],
                "role": row[2],
                "content": row[3],
                "turn_id": _uuid(row[4]),
                "completion_status": row[5],
                "tool_calls": [call.get("id") for call in json.loads(row[6] or "[]")],
                "tool_call_id": row[7] or None,
            }
            for row in db.execute(
                "SELECT id, seq, role, content, turn_id, completion_status, tool_calls, tool_call_id "
                "FROM conversations_message ORDER BY dialog_id, seq"
            )
        ]
    return inbox, messages


class KillScenario:
    """The mock provider and the kill condition of one process fault."""

    def __init__(self, fault_id: str, data_dir: Path) -> None:
        self.fault_id = fault_id
        self.killed = KILLED[fault_id]
        self.pause_file = data_dir / "commit-paused"
        self.client_back = asyncio.Event()

    async def llm(self, request: RecordedRequest) -> SSEResponse:
        body = request.json() or {}
        messages = body.get("messages", [])
        users = [m for m in messages if m.get("role") == "user"]
        text = user_text(users[-1]) if users else ""
        after_tool = bool(messages) and messages[-1].get("role") == "tool"
        if text in (WARM.content, AFTER.content):
            if after_tool:
                return answer_response(f"Answer to: {text}")
            return paced(openai_events(tool_calls=[(f"call_{len(messages)}", LOOKUP, "{}")]))
        if text == QUEUED.content:
            await self.client_back.wait()  # the restarted server's client sees the whole turn
            return answer_response("The queued answer.")
        if text == self.killed.content:
            if self.fault_id == "process-kill-mid-provider":
                return paced(openai_events(" ".join(f"word{n}" for n in range(400))), delay=0.05)
            if self.fault_id == "process-kill-mid-tool":
                return paced(openai_events(tool_calls=[("call_slow", SLOW_TOOL, '{"seconds": 300}')]))
            return answer_response("An answer whose commit never ends.")
        return SSEResponse(500, pieces=[b"unexpected request"], chunked=False)

    async def kill_point(self, client: WsClient) -> None:
        """Return once the killed turn is where the fault hits it."""
        if self.fault_id == "process-kill-mid-provider":
            await client.until("turn_updated", lambda f: "word5" in json.dumps(f["turn"]["blocks"]))
        elif self.fault_id == "process-kill-mid-tool":
            await client.until(
                "turn_updated",
                lambda f: any(b["type"] == "tool" and b["status"] == "running" for b in f["turn"]["blocks"]),
            )
        else:
            async with asyncio.timeout(WAIT):
                while not self.pause_file.exists():  # noqa: ASYNC110 - written by the server process
                    await asyncio.sleep(0.05)


def connect(server: ServeProcess, token: str) -> websockets.connect:
    return websockets.connect(server.ws_url, additional_headers={"Authorization": f"Bearer {token}"})


async def send(client: WsClient, sent: Sent) -> dict:
    await client.send({"type": "message", "content": sent.content, "client_msg_id": sent.client_msg_id})
    return await client.until("ack", lambda f: f["client_msg_id"] == sent.client_msg_id)


async def seen_or_until(client: WsClient, kind: str, predicate: Callable[[dict], bool]) -> dict:
    """The first frame of ``kind`` matching ``predicate``, received already or still to come."""
    for frame in client.frames:
        if frame["type"] == kind and predicate(frame):
            return frame
    return await client.until(kind, predicate)


async def final(client: WsClient, message_id: str) -> dict:
    """The final of the turn that the user message ``message_id`` started (found by its commit)."""
    committed = await seen_or_until(
        client, "turn_committed", lambda f: any(m["id"] == message_id for m in f["messages"])
    )
    turn_id = next(m["turn_id"] for m in committed["messages"] if m["id"] == message_id)
    return await seen_or_until(
        client, "turn_updated", lambda f: f["turn"]["id"] == turn_id and f["turn"]["status"] != "running"
    )


async def run_killed(fault_id: str, data_dir: Path) -> Observation:
    """The whole flow of the module docstring; raises when a step does not happen within ``WAIT``."""
    manage(data_dir, "migrate", "--noinput")
    token = manage(data_dir, "createtoken", "alice").strip().splitlines()[-1]
    scenario = KillScenario(fault_id, data_dir)
    bounds: dict[str, tuple[float, float]] = {}
    frames: list[list[tuple[int, dict]]] = []
    async with LocalSSEServer(handler=scenario.llm) as llm:
        env = {
            **openai_env(llm),
            "PICOBOT_TOOL_MODULES": "tests.faults.serve_plugin",
            "PICOBOT_TURN_CHECKPOINT_SECONDS": "0.3",
            PAUSE_FILE_ENV: str(scenario.pause_file),
        }
        async with asyncio.timeout(4 * WAIT):
            async with ServeProcess(data_dir, env) as server, connect(server, token) as ws:
                before = WsClient(ws)
                await before.until("ready")
                warm = await send(before, WARM)
                await final(before, warm["message_id"])
                await send(before, scenario.killed)
                await send(before, QUEUED)
                await scenario.kill_point(before)
                bounds["peak RSS of serve before the kill, bytes"] = (peak_rss(server), RSS_LIMIT_BYTES)
                assert await server.kill() < 0
            frames.append(list(enumerate(before.frames)))

            async with ServeProcess(data_dir, env) as server:
                async with connect(server, token) as ws:
                    after = WsClient(ws)
                    await after.until("ready")
                    scenario.client_back.set()
                    await seen_or_until(after, "notification", lambda f: f.get("turn_id") is not None)
                    await final(after, (await send(after, QUEUED))["message_id"])
                    await send(after, scenario.killed)  # again: acknowledged, never run
                    last = await send(after, AFTER)
                    await final(after, last["message_id"])
                    await after.barrier()
                async with connect(server, token) as ws:
                    late = WsClient(ws)
                    running_after = (await late.until("ready"))["running"]
                    await late.barrier()
                bounds["peak RSS of serve after the restart, bytes"] = (peak_rss(server), RSS_LIMIT_BYTES)
            frames += [list(enumerate(after.frames)), list(enumerate(late.frames))]
        requests = [request_messages(r.json() or {}) for r in llm.recorded]
    inbox, messages = read_file_rows(data_dir)
    killed_turn = next(
        row["turn_id"] for row in inbox if row["client_msg_id"] == scenario.killed.client_msg_id
    )
    return Observation(
        sent=[WARM, scenario.killed, QUEUED, AFTER],
        frames=frames,
        commits=None,
        inbox=inbox,
        messages=messages,
        requests=requests,
        running_after=running_after,
        killed_turns={killed_turn} if killed_turn else set(),
        bounds=bounds,
    )
