"""The terminal UI's dialog list, older history and retries, by Textual's pilot against the real
``manage.py serve`` (issue 14).

Dialogs and history are made through the REST API (PROTOCOL §2) with the same token; a failing
turn comes from a local OpenAI-compatible server that answers the first "Will this fail?" with
HTTP 500 and the retry with an answer.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, OptionList

from providers.testing import (
    LocalSSEServer,
    RecordedRequest,
    SSEResponse,
    openai_events,
    split_events,
    sse_body,
)
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
from tests.tui.test_tui_live import SIZE, app_for, is_idle, rows, send
from tui.app import ChatApp
from tui.dialog_list import MORE, ConfirmDelete, DialogList, TitlePrompt
from tui.dialogs import PAGE_SIZE

pytestmark = [pytest.mark.e2e]

FLAKY = "Will this fail?"


async def loaded(pilot: Any, app: ChatApp) -> None:
    await until(pilot, lambda: app.store.active and app.store.active.loaded, "the history")


async def open_list(pilot: Any, app: ChatApp) -> OptionList:
    await pilot.press("f2")
    await until(pilot, lambda: isinstance(app.screen, DialogList), "the dialog list")
    return app.screen.query_one(OptionList)


def listed_titles(app: ChatApp) -> list[str]:
    return [str(i.get("title")) for i in app.store.dialog_list.items]


def highlight(options: OptionList, app: ChatApp, title: str) -> None:
    options.highlighted = listed_titles(app).index(title)


async def test_the_dialog_list_reaches_the_oldest_of_30_dialogs_by_paging_and_by_search(
    served: tuple[ServeProcess, str],
):
    server, token = served
    for n in range(1, 31):
        await rest(server, token, "POST", "dialogs", {"title": f"Dialog {n:02}"})
    app = app_for(server, token)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        options = await open_list(pilot, app)
        await until(pilot, lambda: len(listed_titles(app)) == PAGE_SIZE, "the first page")
        assert PAGE_SIZE < 30 and "Dialog 01" not in listed_titles(app)
        assert options.get_option_at_index(options.option_count - 1).id == MORE
        assert str(options.get_option_at_index(0).prompt).startswith("▶ Dialog 30"), "the active one marked"

        await pilot.press("end")  # the highlight at the end asks for the next page
        await until(pilot, lambda: "Dialog 01" in listed_titles(app), "the oldest dialog by paging")
        assert len(listed_titles(app)) == 30 and not app.store.dialog_list.has_more
        highlight(options, app, "Dialog 01")
        await pilot.press("enter")
        await until(pilot, lambda: app.store.active_title == "Dialog 01", "the switch to the oldest")
        assert "Dialog 01" in static_text(app, "#header") and not isinstance(app.screen, DialogList)

        options = await open_list(pilot, app)
        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await pilot.press(*"dialog 0", "1")  # case-insensitive
        await until(pilot, lambda: listed_titles(app) == ["Dialog 01"], "the oldest dialog by search")
        assert str(options.get_option_at_index(0).prompt).startswith("▶"), "the active dialog"
        await pilot.press("down")

        oldest = app.store.dialog_list.items[0]["session_id"]
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, TitlePrompt), "the rename prompt")
        app.screen.query_one(Input).value = "The very first"
        await pilot.press("enter")
        await until(pilot, lambda: listed_titles(app) == ["The very first"], "the renamed dialog")
        assert (await rest(server, token, "GET", dialog_path(oldest)))["title"] == "The very first"
        assert "The very first" in static_text(app, "#header")

        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDelete), "the delete confirm")
        await pilot.press("n")
        assert isinstance(app.screen, DialogList) and listed_titles(app) == ["The very first"], "kept"
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDelete), "the delete confirm")
        await pilot.press("y")
        await until(pilot, lambda: listed_titles(app) == [], "the deleted dialog gone")
        await until(pilot, lambda: app.store.active_session_id not in (None, oldest), "another active dialog")
        remaining = await rest(server, token, "GET", "dialogs?limit=100")
        assert oldest not in [d["session_id"] for d in remaining["items"]] and len(remaining["items"]) == 29

        before = app.store.active_session_id
        await pilot.press("n")
        await until(pilot, lambda: app.store.active_session_id != before, "a new dialog")
        assert not isinstance(app.screen, DialogList) and not rows(app, "user")


async def test_pageup_at_the_top_loads_older_messages_above_the_ones_shown(tmp_path: Path):
    server, token = await start_server(tmp_path, {"PICOBOT_INBOX_CAPACITY": "64"})
    try:
        dialog = await rest(server, token, "POST", "dialogs", {"title": "Long"})
        for n in range(1, 31):  # 30 turns of 2 rows: more than one 50-row page
            await rest(server, token, "POST", dialog_path(dialog["session_id"]) + "/messages",
                       {"content": f"Message {n:02}", "client_msg_id": f"long-{n}"})  # fmt: skip
        path = dialog_path(dialog["session_id"]) + "/messages?limit=1"
        async with asyncio.timeout(WAIT):  # bounds a stuck test; not an assertion on time
            while True:
                if (await rest(server, token, "GET", path))["history_revision"] >= 60:
                    break
                await asyncio.sleep(0.1)
        app = app_for(server, token)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(pilot, app)
            await until(pilot, lambda: "PageUp" in transcript_text(app), "the older-messages hint")
            assert "Message 01" not in transcript_text(app)
            for _ in range(40):  # scroll up page by page; at the top PageUp loads the older page
                if "Message 01" in transcript_text(app):
                    break
                await pilot.press("pageup")
                await pilot.pause(0.05)
            await until(pilot, lambda: "Message 01" in transcript_text(app), "the oldest message")
            d = app.store.active
            assert [m["seq"] for m in d.messages] == list(range(1, 61)) and not d.has_more
            assert "PageUp" not in transcript_text(app)
            assert len(rows(app, "user")) == 30
    finally:
        await server.stop()


class FlakyLLM:
    """The first "Will this fail?" answers HTTP 500; every other request a short answer."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()

    async def __call__(self, request: RecordedRequest) -> SSEResponse:
        users = [m for m in (request.json() or {}).get("messages", []) if m.get("role") == "user"]
        text = str(users[-1].get("content") if users else "")  # may carry a runtime-context part
        asked = FLAKY if FLAKY in text else text
        self.asked[asked] += 1
        if asked == FLAKY and self.asked[FLAKY] == 1:
            error = b'{"error": {"message": "upstream exploded", "type": "server_error"}}'
            return SSEResponse(500, {"content-type": "application/json"}, [error], chunked=False)
        return SSEResponse(200, {"content-type": "text/event-stream"},
                           split_events(sse_body(openai_events("Recovered: here is the answer."))))  # fmt: skip


async def test_a_failed_turn_is_retried_with_ctrl_r_and_a_refused_message_resent_or_dismissed(tmp_path: Path):
    async with LocalSSEServer(handler=FlakyLLM()) as llm:
        env = {"PICOBOT_LLM_PROVIDER": "openai", "PICOBOT_LLM_BASE_URL": llm.base_url,
               "PICOBOT_LLM_API_KEY": "test-key", "PICOBOT_LLM_MODEL": "test-model",
               "PICOBOT_LLM_MAX_RETRIES": "0"}  # fmt: skip
        server, token = await start_server(tmp_path, env)
        try:
            app = app_for(server, token)
            async with app.run_test(size=SIZE) as pilot:
                await loaded(pilot, app)
                await send(pilot, FLAKY)
                await until(
                    pilot, lambda: "Ctrl+R: retry" in transcript_text(app) and is_idle(app), "the failure"
                )
                assert "Failed" in transcript_text(app)
                first = rows(app, "user")[-1].item.data
                await pilot.press("ctrl+r")
                await until(pilot, lambda: len(rows(app, "user")) == 2 and is_idle(app), "the retried turn")
                await until(pilot, lambda: "Recovered" in transcript_text(app), "the retried answer")
                retried = rows(app, "user")[-1].item.data
                assert retried["content"] == FLAKY and retried["id"] != first["id"], "a new message"
                assert "Ctrl+R: retry" not in transcript_text(app), "nothing left to retry"

                sent: list[dict[str, Any]] = []
                real_send = app.connection.send

                async def recording_send(frame: dict[str, Any]) -> bool:
                    sent.append(frame)
                    return await real_send(frame)

                app.connection.send = recording_send  # type: ignore[method-assign]
                await send(pilot, "x" * 32_001)
                await until(pilot, lambda: "not sent: content exceeds" in transcript_text(app), "the refusal")
                assert "Ctrl+D: dismiss" in transcript_text(app)
                await pilot.press("ctrl+r")
                await until(pilot, lambda: len(sent) == 2 and app.store.refused(), "refused again")
                assert sent[0]["client_msg_id"] == sent[1]["client_msg_id"], "resent with the same id"
                await pilot.press("ctrl+d")
                await until(pilot, lambda: "not sent" not in transcript_text(app), "the refusal dismissed")
                assert app.query_one("#input", Input).value == "", "Ctrl+D did not reach the message line"
        finally:
            await server.stop()
