"""Feishu: the real ``serve`` is killed after the platform accepted a final but before it recorded that.

The fake Open API (over HTTP, in this process) applies the call that closes the answer card and
then holds the connection; the server is SIGKILLed while it waits for the answer. After a restart
on the same SQLite file its recovery scan (``PICOBOT_FEISHU_RECOVERY_SECONDS``) delivers the final
again with the same card, sequence plan and uuids: the user still sees exactly one answer. The
same event delivered once more to the restarted server starts no second turn.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import httpx2
import pytest

from providers.testing import LocalSSEServer, RecordedRequest, SSEResponse
from tests.conversations.feishu.conftest import CHAT, VERIFICATION_TOKEN, message_event
from tests.conversations.feishu.fake_server import APP_ID, APP_SECRET, FakeFeishuServer
from tests.conversations.streams import DONE, _chunk
from tests.e2e.serve_process import ServeProcess, manage, openai_env
from tests.e2e.test_restart import WAIT

pytestmark = [pytest.mark.e2e]

WORDS = [f"word{n} " for n in range(20)]  # 2 s at 0.1 s a word: the card opens before the end
ANSWER = "".join(WORDS).strip()


def final_confirmed(data_dir: Path, message_id: str) -> bool | None:
    """Whether the server recorded the final of the answer to ``message_id`` (None: no row yet)."""
    with sqlite3.connect(f"file:{data_dir / 'picobot.sqlite3'}?mode=ro", uri=True, timeout=5) as db:
        row = db.execute(
            "SELECT final_delivered_at FROM conversations_feishumessage WHERE message_id = ?", (message_id,)
        ).fetchone()
    return None if row is None else row[0] is not None


async def post_event(server: ServeProcess, event: dict) -> int:
    async with httpx2.AsyncClient(timeout=10) as client:
        response = await client.post(server.url + "feishu/events/", content=json.dumps(event).encode())
    return response.status_code


async def test_killed_after_the_platform_accepted_the_final_the_restart_shows_it_exactly_once(tmp_path: Path):
    manage(tmp_path, "migrate", "--noinput")

    async def llm_handler(request: RecordedRequest) -> SSEResponse:
        pieces = [_chunk({"role": "assistant", "content": ""})]
        pieces += [_chunk({"content": word}) for word in WORDS] + [_chunk({}, "stop"), DONE]
        return SSEResponse.coerce((200, {"content-type": "text/event-stream"}, pieces, 0.1))

    with FakeFeishuServer() as feishu:
        closing = feishu.hold("set_streaming", when=lambda kw: kw["enabled"] is False)
        async with LocalSSEServer(handler=llm_handler) as llm:
            env = {
                **openai_env(llm),
                "PICOBOT_FEISHU_MODE": "webhook",
                "PICOBOT_FEISHU_APP_ID": APP_ID,
                "PICOBOT_FEISHU_APP_SECRET": APP_SECRET,
                "PICOBOT_FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN,
                "PICOBOT_FEISHU_API_BASE": feishu.url,
                "PICOBOT_FEISHU_RECOVERY_SECONDS": "0.5",
            }
            user = feishu.api.user_message(CHAT, "Count for me.")
            event = message_event(user, "Count for me.")
            server = ServeProcess(tmp_path, env)
            await server.start()
            try:
                assert await post_event(server, event) == 200
                assert await asyncio.to_thread(closing.applied.wait, WAIT), "the card was never closed"
                assert await server.kill() < 0  # the platform applied the close; its answer never came
            finally:
                closing.release.set()
                await server.stop()
            assert final_confirmed(tmp_path, user) is False
            (card,) = feishu.api.bot_messages(CHAT)
            assert card.text == ANSWER and not feishu.api.is_streaming(card.card_id)

            async with ServeProcess(tmp_path, env, port=server.port) as restarted:
                async with asyncio.timeout(WAIT):
                    while True:  # polling the server's file: nothing here could be awaited instead
                        if final_confirmed(tmp_path, user):
                            break
                        await asyncio.sleep(0.1)
                assert await post_event(restarted, event) == 200  # the platform's redelivery
                await asyncio.sleep(1.0)
            assert len(llm.recorded) == 1, "the answered message is not run again"

        (bot,) = feishu.api.bot_messages(CHAT)
        assert bot.message_id == card.message_id and bot.reply_to == user
        assert bot.text == ANSWER and not feishu.api.is_streaming(bot.card_id)
