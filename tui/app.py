"""The Textual app of ``manage.py chat``: one chat, its active dialog, keys and connection state.

Frames go ``ChatConnection`` → ``ChatStore.apply`` → a coalesced redraw of ``tui.view`` items →
the ``seen`` credits of the snapshots just drawn (PROTOCOL §1 "Flow control"). Keys: Enter sends,
Esc or Ctrl+C stops the running turn (a second Ctrl+C within QUIT_WINDOW s, or one while nothing
runs, quits), F2 opens the dialog list (``tui.dialog_list``), PageUp/PageDown scroll the
transcript and PageUp at its top loads older messages (``history`` with ``before_seq``), Ctrl+R
sends a refused message again (same ``client_msg_id``) or retries a failed turn (its text as a new
message), Ctrl+D dismisses a refused message; while ``/…`` is typed ↑/↓ pick a command, Tab or → take it
and Enter takes it too (``ChatInput``).
"""

from __future__ import annotations

import math
import time
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Input, Static

from tui.connection import ChatConnection, ConnectionState
from tui.dialog_list import DIALOG_LIST_CSS, DialogList
from tui.store import ChatStore
from tui.view import provider_label, transcript
from tui.widgets import Transcript

QUIT_WINDOW = 2.0  # seconds in which a second Ctrl+C quits
COMMANDS = [  # PROTOCOL §1 "Slash commands"
    ("/help", "the commands"),
    ("/new [title]", "start a new dialog"),
    ("/sessions", "your recent dialogs"),
    ("/switch <dialog_id>", "make another dialog active"),
    ("/rename <title>", "rename this dialog"),
    ("/delete [dialog_id]", "delete this (or that) dialog"),
    ("/compact", "summarise older history now"),
    ("/info", "about this dialog"),
    ("/model [name]", "list the model presets, or switch to one"),
    ("/tasks", "your background tasks"),
    ("/stop", "stop the running turn (/stop task <id>: a background task)"),
    ('/schedule add "<cron>" <prompt> | list | delete <id>', "scheduled prompts"),
]


def completions(value: str) -> list[tuple[str, str]]:
    """The commands offered while typing ``value``: a ``/`` prefix of their name, no space yet."""
    if not value.startswith("/") or " " in value:
        return []
    return [(u, d) for u, d in COMMANDS if u.split()[0].startswith(value)]


def completed(usage: str) -> str:
    """What taking a command puts in the message line: its name, then a space when it takes an
    argument (``/rename `` waits for the title; ``/help`` is complete)."""
    name, *args = usage.split()
    return f"{name} " if args else name


CSS = """
#header { height: 1; background: $primary; color: $text; padding: 0 1; }
#conn { height: 1; padding: 0 1; color: $text-muted; }
#conn.bad { color: $error; }
#transcript { height: 1fr; padding: 0 1; }
.item { height: auto; margin: 0 0 1 0; }
.user { color: $accent; }
.tool { color: $text-muted; }
.tool.failed, .alert, .outcome, .ended .phase { color: $error; }
.line { color: $text-muted; }
.phase { color: $warning; }
.cut-off { color: $text-muted; text-style: italic; }
.blocks { height: auto; }
Markdown.answer { margin: 0; padding: 0; }
Collapsible.reasoning { padding: 0; margin: 0; border: none; background: transparent; }
Collapsible.reasoning CollapsibleTitle { padding: 0; color: $text-muted; }
Collapsible.reasoning Contents { padding: 0 0 0 2; }
.reasoning-text { color: $text-muted; }
#completions { height: auto; max-height: 10; padding: 0 1; color: $text-muted; display: none; }
#completions.open { display: block; }
"""


class ChatInput(Input):
    """The message line and its command completion (as the WebUI's): while ``/…`` is typed the
    matching commands are listed under the transcript, ↑/↓ move the highlight, Tab or → take
    it (``completed``), Enter takes it too — sent at once when the command has no argument,
    else left as ``/name `` for the argument."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "complete", "Complete", show=False),
        Binding("down", "move(1)", show=False),
        Binding("up", "move(-1)", show=False),
    ]
    matches: list[tuple[str, str]] = []
    index = 0

    def offer(self, matches: list[tuple[str, str]]) -> None:
        """Show ``matches`` (``completions`` of the value), the first highlighted."""
        self.matches, self.index = matches, 0
        self._draw()

    def _draw(self) -> None:
        box = self.screen.query_one("#completions", Static)
        lines = [
            Text(f"{u:<22} {d}", style="reverse" if n == self.index else "")
            for n, (u, d) in enumerate(self.matches)
        ]
        box.update(Text("\n").join(lines))
        box.set_class(bool(self.matches), "open")
        # The dimmed rest of the highlighted command after the cursor (→ takes it, as Tab).
        self._suggestion = completed(self.matches[self.index][0]) if self.matches else ""

    def action_move(self, step: int) -> None:
        if self.matches:
            self.index = (self.index + step) % len(self.matches)
            self._draw()

    def action_complete(self) -> None:
        if self.matches:
            self.value = completed(self.matches[self.index][0])
            self.cursor_position = len(self.value)

    async def action_submit(self) -> None:
        if self.matches:
            text = completed(self.matches[self.index][0])
            self.value = text.strip()  # a command without an argument: sent as it is
            if text.endswith(" "):
                self.action_complete()  # one with an argument waits for it
                return
        await super().action_submit()


class ChatApp(App[None]):
    """``ChatApp(url, token)``: ``url`` is the full ``ws[s]://…/ws/chat/`` endpoint."""

    TITLE = "PicoBot"
    CSS = CSS + DIALOG_LIST_CSS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "interrupt", "Stop · twice: quit", priority=True),
        Binding("escape", "stop", "Stop"),
        Binding("f2", "dialogs", "Dialogs"),
        Binding("pageup", "page_up", "Older", key_display="PgUp"),
        Binding("pagedown", "page_down", "Newer", show=False),
        Binding("ctrl+r", "retry", "Retry"),
        # Priority over the message line's Ctrl+D (delete right), only while a refusal is shown.
        Binding("ctrl+d", "dismiss_refused", "Dismiss", priority=True),
        Binding("ctrl+q", "quit", "Quit"),
    ]

    def __init__(self, url: str, token: str) -> None:
        super().__init__()
        self.store = ChatStore()
        self.connection = ChatConnection(url, token, self.on_frame, self.on_connection_state)
        self.state = ConnectionState("connecting")
        self._retry_at = 0.0
        self._last_interrupt = 0.0
        self._redraw_due = False
        self._seen: dict[str, dict[str, Any]] = {}
        self._dialog_list: DialogList | None = None
        self._anchor: str | None = None  # the item key to keep in view when an older page lands
        self._follow = False  # scroll to the newest on the next redraw (the user sent or stopped)

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        yield Static(id="conn")
        yield Transcript(id="transcript")
        yield Static(id="completions")
        yield ChatInput(placeholder="Message, or / for commands", id="input")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#input").focus()
        self.run_worker(self.connection.run(), name="connection", exclusive=True)
        self.set_interval(1.0, self._draw_state)
        self._draw_header()

    async def on_unmount(self) -> None:
        await self.connection.close()

    # --- frames -------------------------------------------------------------------------------

    async def on_frame(self, frame: dict[str, Any]) -> None:
        fx = self.store.apply(frame)
        for out in fx.send:
            await self.connection.send(out)
        for credit in fx.seen:
            self._seen[credit["turn_id"]] = credit
        if frame["type"] in ("sessions", "session_changed") and self._dialog_list is not None:
            self._dialog_list.refresh_items()
        if fx.changed or fx.seen:
            self._schedule_redraw()

    def on_connection_state(self, state: ConnectionState) -> None:
        self.state = state
        self._retry_at = time.monotonic() + state.retry_in
        self._draw_state()
        self._schedule_redraw()  # a running turn shows "reconnecting…" while the connection is down

    def _schedule_redraw(self) -> None:
        if not self._redraw_due:
            self._redraw_due = True
            self.call_later(self._redraw)

    async def _redraw(self) -> None:
        self._redraw_due = False
        view = self.query_one(Transcript)
        view.sync(transcript(self.store, connected=self.state.kind == "connected"))
        if self._follow:
            self._follow = False
            view.follow()
        self._draw_header()
        self.refresh_bindings()
        d = self.store.active
        if self._anchor and d is not None and d.older_before is None:
            # Keep the row that was at the top in view: the page lands above it.
            view.call_after_refresh(view.show_key, self._anchor)
            self._anchor = None
        # Credits only for what is drawn: the server then sends the next snapshot (PROTOCOL §1).
        credits, self._seen = list(self._seen.values()), {}
        if credits:
            self.call_after_refresh(self._send_credits, credits)

    async def _send_credits(self, credits: list[dict[str, Any]]) -> None:
        for credit in credits:
            await self.connection.send(credit)

    def _draw_header(self) -> None:
        parts = [self.store.user, provider_label(self.store.provider), self.store.active_title]
        self.query_one("#header", Static).update(Text("PicoBot  " + "  ·  ".join(p for p in parts if p)))

    def _draw_state(self) -> None:
        s = self.state
        if s.kind == "reconnecting":
            left = max(0, math.ceil(self._retry_at - time.monotonic()))
            text = f"reconnecting in {left} s (attempt {s.attempt}: {s.detail})"
        elif s.kind == "refused":
            text = "token refused: check --token / PICOBOT_TOKEN, or run createtoken USER --save"
        elif s.kind == "not_found":
            # 403/404 only say the path is wrong ("HTTP 403" would read as a login problem).
            why = "" if s.status in (403, 404) else f" ({s.detail})"
            text = f"no PicoBot WebSocket at {self.connection.url}{why}: check --url"
        else:
            text = {"connecting": "connecting…", "connected": "connected", "closed": "disconnected"}[s.kind]
        found = self.query("#conn")
        if not found:
            return  # the app is closing: the connection reports "closed" after the screen went
        widget = found.first(Static)
        widget.update(Text(f"● {text}"))
        widget.set_class(s.kind != "connected", "bad")

    # --- input --------------------------------------------------------------------------------

    def on_input_changed(self, event: Input.Changed) -> None:
        if isinstance(event.input, ChatInput):
            event.input.offer(completions(event.value))

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        event.input.value = ""
        frame = self.store.send_text(text)
        sent = await self.connection.send(frame)
        if not sent and "client_msg_id" not in frame:
            self.notify("Not connected: the command was not sent.", severity="warning")
        self._follow = True
        self._schedule_redraw()

    # --- actions ------------------------------------------------------------------------------

    async def action_stop(self) -> bool:
        """Stop the running turn of the active dialog; False when nothing runs."""
        frame = self.store.stop_frame()
        if frame is None:
            return False
        await self.connection.send(frame)
        self._follow = True  # "Stopped." lands at the bottom: show it
        self._schedule_redraw()
        return True

    async def action_interrupt(self) -> None:
        now = time.monotonic()
        if now - self._last_interrupt > QUIT_WINDOW and await self.action_stop():
            self._last_interrupt = now
            self.notify("Stopping… press Ctrl+C again to quit.")
            return
        self.exit()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Retry and dismiss only while there is something to act on, and only on the chat
        screen (a disabled binding lets the key through to the message line)."""
        if action == "retry":
            target = self.store.refused() or self.store.retryable_row()
            return self.screen is self.screen_stack[0] and target is not None
        if action == "dismiss_refused":
            return self.screen is self.screen_stack[0] and self.store.refused() is not None
        return True

    async def action_page_up(self) -> None:
        """Scroll the transcript up a page; at its top, load the older page (if any)."""
        view = self.query_one(Transcript)
        if view.scroll_y > 0:
            view.scroll_page_up(animate=False)
            return
        frame = self.store.older_frame()
        if frame is not None:
            self._anchor = view.first_row_key()
            await self.connection.send(frame)
            self._schedule_redraw()

    def action_page_down(self) -> None:
        self.query_one(Transcript).scroll_page_down(animate=False)

    async def action_retry(self) -> None:
        frame = self.store.retry_refused() or self.store.retry_turn()
        if frame is not None:
            await self.connection.send(frame)
            self._schedule_redraw()

    def action_dismiss_refused(self) -> None:
        if self.store.dismiss_refused():
            self._schedule_redraw()

    async def action_dialogs(self) -> None:
        if self._dialog_list is None:
            self._dialog_list = DialogList(self.store, self.connection.send)
            self.push_screen(self._dialog_list, self._picked)

    async def _picked(self, dialog_id: str | None) -> None:
        self._dialog_list = None
        if dialog_id:
            await self.connection.send(self.store.command(f"/switch {dialog_id}"))
