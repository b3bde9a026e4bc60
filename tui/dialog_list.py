"""The dialog list (F2): every dialog of the chat, paged and searched by title (PROTOCOL §1
``sessions``), with the slash commands' operations on the highlighted one.

Keys in the list: Enter switches (``/switch <dialog_id>``), ``/`` searches (each change of the
search box asks for its first page; ↓ or Enter goes back to the list), ``r`` renames (``/rename
<title>`` with that dialog's ``session_id``), ``d`` or Delete deletes after a confirm (``/delete``
with its ``session_id``), ``n`` starts a new dialog (``/new``), Esc closes. The next page is asked
for when the highlight reaches the last dialog, or with the "More…" entry. The list's state is
``ChatStore.dialog_list`` (``tui.dialogs``); the screen only draws it and sends requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from tui.dialogs import dialog_label
from tui.store import ChatStore

MORE = "more"  # the id of the "More…" entry (dialog ids are never this: they are the server's)
HINT = "Enter switch · / search · r rename · d delete · n new · Esc close"
Send = Callable[[dict[str, Any]], Awaitable[Any]]

DIALOG_LIST_CSS = """
DialogList, TitlePrompt, ConfirmDelete { align: center middle; }
DialogList > Vertical { width: 80%; height: 80%; background: $surface; border: round $primary; }
DialogList OptionList { height: 1fr; }
DialogList .hint, TitlePrompt .hint, ConfirmDelete .hint { color: $text-muted; padding: 0 1; }
TitlePrompt > Vertical, ConfirmDelete > Vertical {
    width: 60; height: auto; background: $surface; border: round $primary; padding: 0 1;
}
"""


def option_label(item: dict[str, Any]) -> Text:
    """``tui.dialogs.dialog_label`` as plain text (never Textual markup)."""
    return Text(dialog_label(item))


class DialogOptions(OptionList):
    """The list itself; its keys act on the highlighted dialog."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "screen.rename", "Rename"),
        Binding("d,delete", "screen.delete", "Delete"),
        Binding("n", "screen.new", "New"),
        Binding("slash", "screen.search", "Search"),
    ]


class DialogList(ModalScreen[str | None]):
    """Dismissed with the ``dialog_id`` to switch to, or None (closed, or after ``/new``)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Close")]

    def __init__(self, store: ChatStore, send: Send) -> None:
        super().__init__()
        self.store, self.send = store, send
        self.search_box = Input(
            placeholder="Search titles", id="dialog-search", value=store.dialog_list.query
        )
        self.options = DialogOptions(id="dialogs")

    def compose(self) -> ComposeResult:
        with Vertical():
            yield self.search_box
            yield self.options
            yield Static(Text(HINT), classes="hint")

    async def on_mount(self) -> None:
        self.refresh_items()
        self.options.focus()
        await self.send(self.store.dialog_list.search(self.store.dialog_list.query))

    def refresh_items(self) -> None:
        """Redraw from ``store.dialog_list``, keeping the highlight on the same dialog."""
        pages = self.store.dialog_list
        current = self.highlighted_item()
        keep = current.get("session_id") if current else None
        options = [Option(option_label(i), id=str(i.get("session_id"))) for i in pages.items]
        if pages.has_more:
            options.append(Option(Text("More…", style="italic"), id=MORE))
        elif not pages.items:
            options.append(Option(Text("Loading…" if pages.loading else "No dialogs."), disabled=True))
        self.options.set_options(options)
        ids = [o.id for o in options]
        if keep in ids:
            self.options.highlighted = ids.index(keep)
        elif options and not options[0].disabled:
            self.options.highlighted = 0

    def highlighted_item(self) -> dict[str, Any] | None:
        index = self.options.highlighted
        items = self.store.dialog_list.items
        return items[index] if index is not None and index < len(items) else None

    async def _more(self) -> None:
        frame = self.store.dialog_list.more()
        if frame is not None:
            await self.send(frame)

    # --- events -------------------------------------------------------------------------------

    async def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_index >= len(self.store.dialog_list.items) - 1:
            await self._more()

    async def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id == MORE:
            await self._more()
            return
        item = self.highlighted_item()
        self.dismiss(str(item.get("dialog_id")) if item else None)

    async def on_input_changed(self, event: Input.Changed) -> None:
        if event.input is self.search_box and event.value.strip() != self.store.dialog_list.query:
            await self.send(self.store.dialog_list.search(event.value))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input is self.search_box:
            self.options.focus()

    def on_key(self, event: Any) -> None:
        if event.key == "down" and self.search_box.has_focus:
            self.options.focus()
            event.stop()

    # --- actions ------------------------------------------------------------------------------

    def action_search(self) -> None:
        self.search_box.focus()

    async def action_new(self) -> None:
        await self.send(self.store.command("/new"))
        self.dismiss(None)

    def action_rename(self) -> None:
        item = self.highlighted_item()
        if item is not None:
            self.app.push_screen(
                TitlePrompt(str(item.get("title") or "")), lambda title: self._rename(item, title)
            )

    async def _rename(self, item: dict[str, Any], title: str | None) -> None:
        if title and title.strip():
            await self.send(self.store.command(f"/rename {title.strip()}", str(item["session_id"])))

    def action_delete(self) -> None:
        item = self.highlighted_item()
        if item is not None:
            self.app.push_screen(ConfirmDelete(item), lambda yes: self._delete(item, yes))

    async def _delete(self, item: dict[str, Any], yes: bool | None) -> None:
        if yes:
            await self.send(self.store.command("/delete", str(item["session_id"])))


class TitlePrompt(ModalScreen[str | None]):
    """The new title of a dialog: Enter confirms, Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str) -> None:
        super().__init__()
        self.box = Input(value=title, id="new-title")

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text("Rename the dialog"), classes="hint")
            yield self.box
            yield Static(Text("Enter rename · Esc cancel"), classes="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)


class ConfirmDelete(ModalScreen[bool]):
    """ "Delete this dialog?": y or Enter deletes, n or Esc keeps it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "dismiss(True)", "Delete"),
        Binding("n,escape", "dismiss(False)", "Keep"),
    ]

    def __init__(self, item: dict[str, Any]) -> None:
        super().__init__()
        self.item = item

    def compose(self) -> ComposeResult:
        title = self.item.get("title") or "(untitled)"
        with Vertical():
            yield Static(Text(f"Delete “{title}” and its messages?"))
            yield Static(Text("y delete · n keep"), classes="hint")
