"""Textual widgets of the transcript, each bound to one view item key and updated in place.

``Transcript.sync(items)`` keeps one widget per ``tui.view.Item``: new keys are mounted in order,
gone keys removed, existing widgets updated — a running turn is redrawn where it stands, never
appended as a new line per snapshot (seed 003 §12). It follows the newest content while the
reader is at the bottom (Textual's anchor: scrolling up releases it, reaching the bottom again
restores it) and after ``follow()`` (the user sent or stopped something). Text from the server is never parsed as Textual markup.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Collapsible, Markdown, Static

from tui.markdown import parser
from tui.view import (
    DISMISS_KEY,
    RETRY_KEY,
    Item,
    cut_off_text,
    pending_label,
    sender_label,
    tool_line,
    turn_text,
    user_text,
)


def _clock(ms: Any) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%H:%M") if isinstance(ms, int) else ""


class Reasoning(Collapsible):
    """Reasoning, collapsed by default; its text updated in place."""

    def __init__(self, text: str, name: str | None = None) -> None:
        self.body = Static(Text(text), classes="reasoning-text")
        super().__init__(self.body, title="Reasoning", collapsed=True, classes="reasoning", name=name)

    def set_text(self, text: str) -> None:
        self.body.update(Text(text))


class Answer(Markdown):
    """Assistant text rendered as Markdown; re-rendered only when the text changed."""

    def __init__(self, text: str, name: str | None = None) -> None:
        super().__init__(text, classes="answer", name=name, parser_factory=parser)
        self.text = text

    def set_text(self, text: str) -> None:
        if text != self.text:
            self.text = text
            self.update(text)


class ItemView(Vertical):
    """A transcript entry; subclasses draw one kind of item."""

    def __init__(self, item: Item, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.item = item

    def show(self, item: Item) -> None:
        """Update to a newer version of the same item (the default: nothing changes)."""
        self.item = item


class RowView(ItemView):
    """A history row: the user's message, or an assistant row (reasoning, tool calls, answer)."""

    def compose(self):  # type: ignore[override]
        row = self.item.data
        role = row.get("role")
        if role == "user":
            self.add_class("user")
            yield Static(
                Text(f"{sender_label(row)}  {_clock(row.get('created_at'))}", style="bold"), classes="who"
            )
            yield Static(Text(user_text(row)), classes="user-text")
            return
        self.add_class(role or "row")
        if row.get("reasoning"):
            yield Reasoning(str(row["reasoning"]))
        self.tools = [Static(self._tool_text(call), classes="tool") for call in row.get("tool_calls") or []]
        yield from self.tools
        if role == "tool":  # a result whose call is not on this page
            yield Static(Text(f"⚙ {row.get('tool_name') or 'tool'} result"), classes="tool")
        if row.get("content") and role == "assistant":
            yield Answer(str(row["content"]))
        cut = cut_off_text(row.get("truncated"), bool(row.get("content"))) if role == "assistant" else None
        if cut:
            yield Static(Text(cut), classes="cut-off")

    def show(self, item: Item) -> None:
        super().show(item)
        for widget, call in zip(getattr(self, "tools", []), item.data.get("tool_calls") or [], strict=False):
            widget.update(self._tool_text(call))

    def _tool_text(self, call: dict[str, Any]) -> Text:
        result = (self.item.results or {}).get(call.get("id"))
        status = "running" if result is None else ("failed" if result.get("is_error") else "completed")
        style = "red" if status == "failed" else ""
        return Text(tool_line(str(call.get("name")), call.get("arguments"), status), style=style)


class TextLine(ItemView):
    """An outcome ("Failed: …", "Stopped."), a notice, or a pending message."""

    def compose(self):  # type: ignore[override]
        self.label = Static(self._text(), classes="line")
        yield self.label

    def show(self, item: Item) -> None:
        super().show(item)
        if hasattr(self, "label"):  # else compose draws the newest item
            self.label.update(self._text())

    def _text(self) -> Text:
        kind, data = self.item.kind, self.item.data
        if kind == "line":
            self.set_class(data.level in ("warning", "error"), "alert")
            return Text(data.text)
        if kind == "pending":
            self.add_class("user")
            label = pending_label(data)
            self.set_class(data.status == "failed", "alert")
            keys = f"\n{RETRY_KEY}: send again · {DISMISS_KEY}: dismiss" if data.status == "failed" else ""
            return Text(f"You{f'  ({label})' if label else ''}\n{data.content}{keys}")
        return Text(str(data))


class TurnView(ItemView):
    """The live turn: its blocks (reasoning, tool lines, answer) by block id, then its status
    line (the phase, "reconnecting…", how it ended) under the newest line, where a reader
    following the stream looks (above the blocks a long answer scrolled it out of view)."""

    def compose(self):  # type: ignore[override]
        self.blocks = Vertical(classes="blocks")
        yield self.blocks
        self.cut_off = Static(classes="cut-off")
        yield self.cut_off
        self.phase = Static(classes="phase")
        yield self.phase

    def on_mount(self) -> None:
        self.show(self.item)

    def show(self, item: Item) -> None:
        super().show(item)
        if not self.is_mounted:
            return  # on_mount draws the newest item
        turn = item.data
        text = turn_text(turn, item.connected)
        self.phase.update(Text(text))
        self.phase.display = bool(text)
        self.set_class(turn.get("status") in ("failed", "cancelled"), "ended")
        blocks = turn.get("blocks") or []
        self._draw_blocks(blocks)
        answered = any(b.get("type") == "assistant" and b.get("text") for b in blocks)
        cut = cut_off_text(turn.get("truncated"), answered)
        self.cut_off.update(Text(cut or ""))
        self.cut_off.display = bool(cut)

    def _draw_blocks(self, blocks: list[dict[str, Any]]) -> None:
        shown = {w.name: w for w in self.blocks.children}
        for n, block in enumerate(blocks):
            key = f"{block.get('type')}-{block.get('id') or n}"
            kind, text = block.get("type"), str(block.get("text") or "")
            widget = shown.get(key)
            if kind == "tool":
                line = Text(
                    tool_line(str(block.get("name")), block.get("arguments"), str(block.get("status")))
                )
                if widget is None:
                    widget = Static(line, classes="tool", name=key)
                    self.blocks.mount(widget)
                else:
                    widget.update(line)
                widget.set_class(block.get("status") == "failed", "failed")
            elif kind in ("reasoning", "assistant"):
                if widget is None:
                    widget = Reasoning(text, key) if kind == "reasoning" else Answer(text, key)
                    self.blocks.mount(widget)
                else:
                    widget.set_text(text)


def view_for(item: Item) -> ItemView:
    classes = f"item {item.kind}"
    if item.kind == "row":
        return RowView(item, classes=classes)
    if item.kind == "turn":
        return TurnView(item, classes=classes)
    return TextLine(item, classes=classes)


class Transcript(VerticalScroll):
    """The active dialog's transcript, kept in sync with ``tui.view.transcript`` items. PageUp
    is the app's (at the top it loads older messages)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("pageup", "app.page_up", "Older", show=False),
        Binding("pagedown", "app.page_down", "Newer", show=False),
    ]

    def on_mount(self) -> None:
        self.anchor()

    def follow(self) -> None:
        """Scroll to the newest content and keep following it (the anchor is restored)."""
        self.scroll_end(animate=False)

    def first_row_key(self) -> str | None:
        """The key of the first history row shown, or None."""
        return next(
            (c.item.key for c in self.children if isinstance(c, ItemView) and c.item.kind == "row"), None
        )

    def show_key(self, key: str) -> None:
        """Scroll so that the item ``key`` is at the top (nothing when it is not shown)."""
        view = next((c for c in self.children if isinstance(c, ItemView) and c.item.key == key), None)
        if view is not None:
            self.scroll_to_widget(view, animate=False, top=True)

    def sync(self, items: list[Item]) -> None:
        wanted = {i.key for i in items}
        views: dict[str, ItemView] = {}
        for child in list(self.children):
            if isinstance(child, ItemView) and child.item.key in wanted:
                views[child.item.key] = child
            else:
                child.remove()
        if [k for k in (i.key for i in items) if k in views] != list(views):
            for view in views.values():  # reordered (rare): draw afresh
                view.remove()
            views = {}
        first_kept = next(iter(views.values()), None)
        previous: Widget | None = None
        for item in items:
            view = views.get(item.key)
            if view is None:
                view = view_for(item)
                if previous is not None:
                    self.mount(view, after=previous)
                elif first_kept is not None:
                    self.mount(view, before=first_kept)
                else:
                    self.mount(view)
            elif view.item != item:
                view.show(item)
            previous = view
