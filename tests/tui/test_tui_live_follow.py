"""The terminal UI follows the conversation and names a wrong URL, by Textual's pilot against the
real ``manage.py serve`` (issue 14): sending or stopping after reading old messages shows the
newest, and a WebSocket path the server does not serve is not reported as a refused token.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.tui.conftest import (
    WAIT,
    ServeProcess,
    dialog_path,
    rest,
    start_server,
    static_text,
    transcript_text,
    until,
)
from tests.tui.test_tui_live import app_for, is_idle, send
from tui.app import ChatApp
from tui.config import chat_url
from tui.widgets import Transcript, TurnView

pytestmark = [pytest.mark.e2e]

SMALL = (100, 24)  # a short screen: a dozen turns overflow it


def at_bottom(app: ChatApp) -> bool:
    view = app.query_one(Transcript)
    return view.max_scroll_y > 0 and view.scroll_y >= view.max_scroll_y - 1


async def test_sending_or_stopping_after_reading_old_messages_shows_the_newest(tmp_path: Path):
    # The history is made at full speed; the server then restarts slow, so a turn can be stopped.
    server, token = await start_server(tmp_path, {})
    try:
        dialog = await rest(server, token, "POST", "dialogs", {"title": "Long"})
        for n in range(1, 13):
            await rest(server, token, "POST", dialog_path(dialog["session_id"]) + "/messages",
                       {"content": f"Message {n:02}", "client_msg_id": f"long-{n}"})  # fmt: skip
        path = dialog_path(dialog["session_id"]) + "/messages?limit=1"
        async with asyncio.timeout(WAIT):  # bounds a stuck test; not an assertion on time
            while True:
                if (await rest(server, token, "GET", path))["history_revision"] >= 24:
                    break
                await asyncio.sleep(0.1)
        await server.stop()
        server = ServeProcess(tmp_path, {"PICOBOT_REPLAY_EVENT_DELAY": "0.3"})
        await server.start()
        app = app_for(server, token)
        async with app.run_test(size=SMALL) as pilot:
            await until(pilot, lambda: "Message 12" in transcript_text(app) and is_idle(app), "the history")
            await until(pilot, lambda: at_bottom(app), "the newest message in view")

            await pilot.press("pageup", "pageup")
            await until(pilot, lambda: not at_bottom(app), "old messages in view")
            await send(pilot, "What time is it?")
            await until(pilot, lambda: app.query(TurnView), "the live turn")
            await until(pilot, lambda: at_bottom(app), "the view at the newest after sending")

            await pilot.press("pageup", "pageup")
            await until(pilot, lambda: not at_bottom(app), "old messages in view again")
            await pilot.pause(1.0)
            assert not at_bottom(app), "a reader of old messages is not pulled down by the live turn"
            await until(pilot, lambda: is_idle(app), "the answer")

            await send(pilot, "What time is it?")
            await until(pilot, lambda: app.store.running_turn(), "a running turn")
            await pilot.press("ctrl+c")
            await until(pilot, lambda: "Stopped." in transcript_text(app) and is_idle(app), "Stopped.")
            await pilot.pause(0.3)
            assert at_bottom(app), "the Stopped. line is in view"
    finally:
        await server.stop()


async def test_a_wrong_websocket_path_is_named_as_the_url_not_the_token(served: tuple[ServeProcess, str]):
    server, token = served
    url = chat_url(server.url).replace("/ws/chat/", "/some/path")
    app = ChatApp(url, token)
    async with app.run_test(size=SMALL) as pilot:
        await until(pilot, lambda: app.state.kind in ("not_found", "refused"), "the handshake answer")
        text = static_text(app, "#conn")
        assert app.state.kind == "not_found", text
        assert f"no PicoBot WebSocket at {url}: check --url" in text
        assert "token" not in text and "403" not in text, "not read as a login problem"
