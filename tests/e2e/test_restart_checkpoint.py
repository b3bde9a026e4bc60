"""A turn killed mid-stream keeps the words it showed (as of its last checkpoint) after a restart.

The real ``serve`` streams a paced answer ("word0 word1 …") from a mock OpenAI-compatible server;
once the client has seen ``word12`` and the turn's checkpoint in the SQLite file holds it
(``PICOBOT_TURN_CHECKPOINT_SECONDS`` = 0.3), the server is SIGKILLed. After a restart on the
same file the history holds the user message with its ``interrupted`` outcome and the answer as
far as it was saved, ``completion_status: interrupted``. Waiting on the file, not on a clock,
keeps the test deterministic.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from providers.testing import LocalSSEServer, RecordedRequest, SSEResponse
from tests.conversations.streams import DONE, _chunk
from tests.e2e.serve_process import ServeProcess, manage, openai_env
from tests.e2e.test_restart import WAIT, WsClient, connect

pytestmark = [pytest.mark.e2e]

WORDS = [f"word{n} " for n in range(300)]  # 30 s at 0.1 s a word: the kill comes long before the end


def checkpointed_text(data_dir: Path) -> str:
    """The running turn's saved text in the server's SQLite file ("" when none)."""
    with sqlite3.connect(f"file:{data_dir / 'picobot.sqlite3'}?mode=ro", uri=True, timeout=5) as db:
        row = db.execute(
            "SELECT checkpoint FROM conversations_inboxmessage WHERE status = 'started' AND checkpoint IS NOT NULL"
        ).fetchone()
    return json.loads(row[0])["text"] if row else ""


async def test_a_turn_killed_mid_stream_keeps_its_checkpointed_words_after_a_restart(tmp_path: Path):
    manage(tmp_path, "migrate", "--noinput")
    token = manage(tmp_path, "createtoken", "alice").strip().splitlines()[-1]

    async def llm_handler(request: RecordedRequest) -> SSEResponse:
        pieces = [_chunk({"role": "assistant", "content": ""})]
        pieces += [_chunk({"content": word}) for word in WORDS] + [_chunk({}, "stop"), DONE]
        return SSEResponse.coerce((200, {"content-type": "text/event-stream"}, pieces, 0.1))

    async with LocalSSEServer(handler=llm_handler) as llm:
        env = {**openai_env(llm), "PICOBOT_TURN_CHECKPOINT_SECONDS": "0.3"}
        async with ServeProcess(tmp_path, env) as server, connect(server, token) as ws:
            client = WsClient(ws)
            session_id = (await client.until("ready"))["active_session_id"]
            await client.send({"type": "message", "content": "Count for me.", "client_msg_id": "count-1"})
            ack = await client.until("ack")
            shown = await client.until("turn_updated", lambda f: "word12" in json.dumps(f["turn"]["blocks"]))
            turn_id, reply_id = shown["turn"]["id"], shown["turn"]["message_id"]
            async with asyncio.timeout(WAIT):
                while True:
                    saved = checkpointed_text(tmp_path)
                    if "word12" in saved:
                        break
                    await asyncio.sleep(0.05)
            assert await server.kill() < 0

        async with ServeProcess(tmp_path, env) as server, connect(server, token) as ws:
            client = WsClient(ws)
            await client.until("ready")
            await client.until("notification", lambda f: f.get("turn_id") == turn_id)
            await client.send({"type": "history", "session_id": session_id})
            history = (await client.until("session_history"))["messages"]
        assert len(llm.recorded) == 1, "the interrupted turn is not run again"

    user, answer = history
    assert user["id"] == ack["message_id"] and user["outcome"]["status"] == "interrupted"
    assert answer["id"] == reply_id and answer["turn_id"] == turn_id
    assert answer["role"] == "assistant" and answer["completion_status"] == "interrupted"
    # The last checkpoint: the one read above, or one saved between that read and the kill.
    assert answer["content"].startswith(saved)
    assert "".join(WORDS).startswith(answer["content"]) and "word12" in answer["content"]
