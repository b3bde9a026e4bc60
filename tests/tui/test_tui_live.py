"""The terminal UI driven by Textual's pilot against the real ``manage.py serve`` (issue 14).

The LLM is the offline replay provider: "What time is it?" streams reasoning, a ``current_time``
call and an answer, one event every 0.1 s (0.3 s where every phase must be drawn while running,
0.5 s where a turn must still run when it is stopped).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, OptionList

from tests.e2e.serve_process import ServeProcess, manage
from tests.tui.conftest import start_server, static_text, transcript_text, until
from tui.app import ChatApp, DialogList
from tui.config import chat_url, resolve
from tui.widgets import Answer, Reasoning, RowView, TextLine, TurnView

pytestmark = [pytest.mark.e2e]

SIZE = (110, 45)


def app_for(server: ServeProcess, token: str) -> ChatApp:
    return ChatApp(chat_url(server.url), token)


async def send(pilot: Any, text: str) -> None:
    pilot.app.query_one("#input", Input).value = text
    await pilot.press("enter")


def rows(app: ChatApp, role: str) -> list[RowView]:
    return [r for r in app.query(RowView) if r.item.data.get("role") == role]


def is_idle(app: ChatApp) -> bool:
    return not app.query(TurnView) and app.store.running_turn() is None and not app.store.pending


async def test_a_tool_turn_streams_in_place_and_settles_into_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # 0.3 s per event: each phase stays on screen across several of the TUI's coalesced redraws,
    # also on a loaded machine (at 0.1 s the answer's one running snapshot could merge into the
    # final one).
    server, token = await start_server(tmp_path, {"PICOBOT_REPLAY_EVENT_DELAY": "0.3"})
    try:
        await _a_tool_turn_streams_in_place(server, token, monkeypatch)
    finally:
        await server.stop()


async def _a_tool_turn_streams_in_place(
    server: ServeProcess, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[tuple[int, str, tuple[str, ...]]] = []
    show = TurnView.show

    def recording_show(self: TurnView, item: Any) -> None:
        drawn.append((id(self), item.data["status"], tuple(b["type"] for b in item.data["blocks"])))
        show(self, item)

    monkeypatch.setattr(TurnView, "show", recording_show)
    app = app_for(server, token)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "alice" in static_text(app, "#header"), "the header after ready")
        header = static_text(app, "#header")
        assert "alice" in header and "replay" in header and "replay · replay" not in header
        await send(pilot, "What time is it?")
        await until(pilot, lambda: app.query(TurnView), "the live turn")
        await until(pilot, lambda: rows(app, "assistant") and is_idle(app), "the committed answer")
        await until(pilot, lambda: "⚙ current_time" in transcript_text(app), "the committed tool call")

        running = [blocks for _, status, blocks in drawn if status == "running"]
        assert any("reasoning" in b for b in running), drawn
        assert any("tool" in b for b in running), drawn
        assert any("assistant" in b for b in running), drawn
        assert len({view for view, _, _ in drawn}) == 1, "one widget redrawn in place, not one per snapshot"

        text = transcript_text(app)
        assert "What time is it?" in text
        assert "⚙ current_time" in text and "completed" in text
        reasoning = app.query(Reasoning)
        assert reasoning and all(r.collapsed for r in reasoning)
        answers = [a.text for a in app.query(Answer)]
        assert answers and answers[-1].strip()
        # The transcript holds one widget per item: history rows, no leftovers of snapshots.
        assert len(app.query("#transcript > .item")) == len(rows(app, "user")) + len(rows(app, "assistant"))


async def test_esc_and_ctrl_c_stop_the_running_turn_and_ctrl_c_when_idle_quits(tmp_path: Path):
    server, token = await start_server(tmp_path, {"PICOBOT_REPLAY_EVENT_DELAY": "0.5"})
    try:
        app = app_for(server, token)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.store.active and app.store.active.loaded, "the history")
            for n, key in enumerate(["escape", "ctrl+c"], start=1):
                await send(pilot, "What time is it?")
                await until(pilot, lambda: app.query(TurnView) and app.store.running_turn(), "a running turn")
                await pilot.press(key)
                await until(
                    pilot,
                    lambda n=n: transcript_text(app).count("Stopped.") == n and is_idle(app),
                    f"Stopped. ({key})",
                )
                assert app.is_running, f"{key} stops the turn, it does not quit"
                outcome = rows(app, "user")[-1].item.data.get("outcome")
                assert (outcome or {"status": "cancelled"})["status"] == "cancelled"
            await pilot.press("ctrl+c")
            await until(pilot, lambda: not app.is_running, "the app to quit")
    finally:
        await server.stop()


async def test_typing_slash_he_offers_help_and_tab_completes_it(served: tuple[ServeProcess, str]):
    server, token = served
    app = app_for(server, token)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.store.active and app.store.active.loaded, "the history")
        await pilot.press("slash", "h", "e")
        box = "#completions"
        await until(pilot, lambda: "/help" in static_text(app, box), "the completion list")
        assert "/new" not in static_text(app, box)
        await pilot.press("tab")
        assert app.query_one("#input", Input).value == "/help"
        await pilot.press("enter")
        await until(pilot, lambda: "/switch" in transcript_text(app), "the /help answer in the transcript")
        assert app.query(TextLine), "command answers are transcript lines"


async def test_the_dialog_list_switches_to_another_dialog(served: tuple[ServeProcess, str]):
    server, token = served
    app = app_for(server, token)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.store.active and app.store.active.loaded, "the history")
        first = app.store.active_session_id
        await send(pilot, "Hello there")
        await until(pilot, lambda: rows(app, "assistant") and is_idle(app), "the first answer")
        await send(pilot, "/new Second dialog")
        await until(pilot, lambda: "Second dialog" in static_text(app, "#header"), "the new dialog")
        assert app.store.active_session_id != first and not rows(app, "user")

        await pilot.press("f2")
        await until(pilot, lambda: isinstance(app.screen, DialogList), "the dialog list")
        options = app.screen.query_one(OptionList)
        await until(pilot, lambda: options.option_count == 2, "two dialogs listed")
        options.highlighted = next(
            n for n in range(options.option_count) if options.get_option_at_index(n).id == first
        )
        await pilot.press("enter")
        await until(
            pilot, lambda: app.store.active_session_id == first and rows(app, "user"), "the first dialog"
        )
        assert "Hello there" in transcript_text(app) and not isinstance(app.screen, DialogList)


async def test_the_tui_reconnects_after_a_server_restart_and_converges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The token comes from ``createtoken --save`` (as ``manage.py chat`` reads it)."""
    config_home = tmp_path / "config"
    server = ServeProcess(tmp_path / "data", {"PICOBOT_REPLAY_EVENT_DELAY": "0.05"})
    (tmp_path / "data").mkdir()
    await server.start()
    try:
        manage(server.data_dir, "createtoken", "alice", "--save", "--url", server.url,
               extra_env={"XDG_CONFIG_HOME": str(config_home)})  # fmt: skip
        config = resolve(None, None, env={"XDG_CONFIG_HOME": str(config_home)})
        app = ChatApp(config.url, config.token)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.store.active and app.store.active.loaded, "the history")
            await send(pilot, "Hello there")
            await until(pilot, lambda: rows(app, "assistant") and is_idle(app), "the first answer")

            assert await server.stop() == 0
            await until(pilot, lambda: "reconnecting in" in static_text(app, "#conn"), "the outage shown")
            await send(pilot, "Are you back?")
            await until(
                pilot, lambda: "sending…" in transcript_text(app), "the message typed offline as pending"
            )

            await server.start()
            await until(pilot, lambda: static_text(app, "#conn") == "● connected", "connected again")
            await until(pilot, lambda: len(rows(app, "assistant")) == 2 and is_idle(app), "the second answer")
            user_texts = [m["content"] for m in app.store.active.messages if m["role"] == "user"]
            assert user_texts == ["Hello there", "Are you back?"], "sent once, after the reconnect"
            assert [m["seq"] for m in app.store.active.messages] == list(range(1, 5))
            assert len(rows(app, "user")) == 2 and not app.query(TurnView)
    finally:
        await server.stop()


async def test_a_refused_token_is_shown_and_not_retried(served: tuple[ServeProcess, str]):
    server, _ = served
    app = app_for(server, "pb_not_a_token")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.kind == "refused", "the refusal")
        assert "token refused" in static_text(app, "#conn")
        assert app.store.active is None, "no ready for a refused connection"
