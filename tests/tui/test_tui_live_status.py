"""The live turn's status line and command completion, by Textual's pilot against the real
``manage.py serve`` (issue 14): the phase is shown under the newest streamed line while an answer
runs, "reconnecting…" while the server is down (killed mid-turn: ``ServeProcess`` keeps its port);
a command that takes an argument completes to ``/name `` and Enter takes the highlighted command.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widget import Widget
from textual.widgets import Input

from tests.tui.conftest import ServeProcess, start_server, static_text, transcript_text, until
from tests.tui.test_tui_live import SIZE, app_for, is_idle, send
from tui.app import ChatApp
from tui.view import PHASES
from tui.widgets import Transcript, TurnView

pytestmark = [pytest.mark.e2e]

SMALL = (100, 16)  # the turn overflows the transcript: a status line at its top would scroll away


def status_line(app: ChatApp) -> str | None:
    """The live turn's status text when it is drawn inside the transcript's visible area, under
    the turn's blocks; else None."""
    views = app.query(TurnView)
    if not views:
        return None
    turn = views.first()
    phase: Widget = turn.phase
    shown = app.query_one(Transcript).content_region
    if not phase.display or not shown.contains_region(phase.region):
        return None
    if turn.blocks.children and phase.region.y < turn.blocks.region.bottom:
        return None
    return str(phase.content)


async def test_the_phase_line_is_visible_under_the_streaming_answer(tmp_path: Path):
    server, token = await start_server(tmp_path, {"PICOBOT_REPLAY_EVENT_DELAY": "0.3"})
    try:
        app = app_for(server, token)
        async with app.run_test(size=SMALL) as pilot:
            await until(pilot, lambda: app.store.active and app.store.active.loaded, "the history")
            await send(pilot, "What time is it?")
            seen: set[str] = set()

            def answering() -> bool:
                text = status_line(app)
                if text:
                    seen.add(text)
                return "answering…" in seen

            await until(pilot, answering, "the phase under the streaming answer")
            assert seen <= set(PHASES.values()) | {"working…"}, seen
            assert "thinking…" in seen, seen
            await until(pilot, lambda: is_idle(app), "the committed answer")
    finally:
        await server.stop()


async def test_a_running_answer_says_reconnecting_while_the_server_is_down(tmp_path: Path):
    server: ServeProcess
    server, token = await start_server(tmp_path, {"PICOBOT_REPLAY_EVENT_DELAY": "0.5"})
    try:
        app = app_for(server, token)
        async with app.run_test(size=SMALL) as pilot:
            await until(pilot, lambda: app.store.active and app.store.active.loaded, "the history")
            await send(pilot, "What time is it?")
            await until(pilot, lambda: status_line(app) in PHASES.values(), "a running phase")
            await server.kill()  # a crash: the turn does not end before the connection drops
            await until(pilot, lambda: status_line(app) == "reconnecting…", "reconnecting… on the turn")
            await server.start()
            await until(pilot, lambda: app.state.kind == "connected", "the reconnect")
            await until(pilot, lambda: is_idle(app), "the turn settled after the restart")
            assert status_line(app) is None
    finally:
        await server.stop()


async def test_a_command_with_an_argument_completes_with_a_space_and_enter_takes_the_highlight(
    served: tuple[ServeProcess, str],
):
    server, token = served
    app = app_for(server, token)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.store.active and app.store.active.loaded, "the history")
        field = app.query_one("#input", Input)
        await pilot.press("slash", "r", "e", "n", "tab")
        assert field.value == "/rename ", "a command that takes an argument gets a space"
        await pilot.press(*"TUI named", "enter")
        await until(pilot, lambda: app.store.active_title == "TUI named", "the renamed dialog")
        assert "unknown command" not in transcript_text(app)

        # Enter on a partial command with the list open: one with an argument waits for it ...
        await pilot.press("slash", "d", "e", "l", "enter")
        assert field.value == "/delete "
        assert not app.query_one("#completions").has_class("open")
        field.value = ""
        # ... ↓ moves the highlight, and a command without an argument is sent at once.
        await pilot.press("slash", "s")
        await until(pilot, lambda: "/switch" in static_text(app, "#completions"), "the completion list")
        await pilot.press("down", "down", "enter")  # /sessions, /switch, /stop: the third
        assert field.value == ""
        await pilot.press("slash", "i", "n", "enter")
        await until(pilot, lambda: "tokens used:" in transcript_text(app), "the /info answer, sent at once")
