"""The dialog list (F2) as pure state: the ``sessions`` pages loaded so far for one title search.

PROTOCOL §1 ``sessions``: the request is ``{type: sessions, limit, offset, query}`` (``limit`` ≤
100, ``query`` a case-insensitive title search, none when blank); the answer is ``{items,
has_more, offset}`` plus ``query`` when the request had one. An answer belongs to the list when
it echoes the list's search: offset 0 replaces the items, an offset equal to the number of items
held appends the next page, any other offset is stale and changes nothing. ``session_changed``
keeps the loaded items current (created, renamed, switched to, deleted), which keeps the
server's offsets and ours in step. No Textual, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

PAGE_SIZE = 20  # dialogs per `sessions` request of the list (the server allows up to 100)
DEFAULT_TITLE = "New chat"  # the server's title of a dialog nobody named yet
PREVIEW_CHARS = 50


@dataclass
class DialogPages:
    """``items``: ``sessions`` items (``{session_id, dialog_id, title, last_active_at,
    message_count, active}``), most recently active first; ``loading``: a page of ``query`` is
    asked and not answered yet."""

    query: str = ""
    items: list[dict[str, Any]] = field(default_factory=list)
    has_more: bool = False
    loading: bool = False

    def search(self, query: str = "") -> dict[str, Any]:
        """The request for the first page of ``query`` (stripped; "" lists every dialog). The
        items shown stay until its answer replaces them."""
        self.query, self.loading = query.strip(), True
        return self._request(0)

    def more(self) -> dict[str, Any] | None:
        """The request for the next page; None when there is none or a page is on its way."""
        if not self.has_more or self.loading:
            return None
        self.loading = True
        return self._request(len(self.items))

    def reset(self) -> None:
        """After a reconnect: answers asked on the old connection never come."""
        self.loading = False

    def apply(self, frame: dict[str, Any]) -> bool:
        """Take a ``sessions`` answer; True when it was one of this list's pages."""
        if str(frame.get("query") or "") != self.query:
            return False
        offset = frame.get("offset") or 0
        rows = [i for i in frame.get("items") or [] if isinstance(i, dict)]
        if offset == 0:
            self.items = rows
        elif offset == len(self.items):
            held = {i.get("session_id") for i in self.items}
            self.items += [i for i in rows if i.get("session_id") not in held]
        else:
            return False
        self.has_more, self.loading = bool(frame.get("has_more")), False
        return True

    def changed(self, frame: dict[str, Any]) -> None:
        """Apply a ``session_changed``: a deleted dialog leaves, a known one takes its new title
        and active mark, an unknown one (a new dialog) is put first when no search narrows the
        list."""
        sid = frame.get("session_id")
        item = next((i for i in self.items if i.get("session_id") == sid), None)
        if frame.get("deleted"):
            if item is not None:
                self.items.remove(item)
            return
        if frame.get("active"):
            for other in self.items:
                other["active"] = False
        if item is None:
            if self.query:
                return
            item = {"session_id": sid, "message_count": 0}
            self.items.insert(0, item)
        item.update(
            dialog_id=frame.get("dialog_id"), title=frame.get("title"), active=bool(frame.get("active"))
        )

    def _request(self, offset: int) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "sessions", "limit": PAGE_SIZE, "offset": offset}
        if self.query:
            out["query"] = self.query
        return out


def when(ms: Any, now: datetime | None = None) -> str:
    """A ``last_active_at`` (ms since the epoch) in local time: "today 14:02", "yesterday 14:02",
    "3 Mar" this year, else "3 Mar 2024"; "" when absent."""
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return ""
    at, now = datetime.fromtimestamp(ms / 1000), now or datetime.now()
    if at.date() == now.date():
        return f"today {at:%H:%M}"
    if at.date() == (now - timedelta(days=1)).date():
        return f"yesterday {at:%H:%M}"
    return f"{at.day} {at:%b}" + ("" if at.year == now.year else f" {at.year}")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def display_title(item: dict[str, Any]) -> str:
    """The title; for a dialog still called the default, its ``preview`` (the first user message,
    when the server sends one) in quotes instead; "(untitled)" when there is neither."""
    title = str(item.get("title") or "")
    preview = " ".join(str(item.get("preview") or "").split())
    if preview and title in ("", DEFAULT_TITLE):
        cut = preview if len(preview) <= PREVIEW_CHARS else preview[: PREVIEW_CHARS - 1] + "…"
        return f"“{cut}”"
    return title or "(untitled)"


def dialog_label(item: dict[str, Any], now: datetime | None = None) -> str:
    """``▶ title · today 14:02 · 3 messages · dialog_id`` (▶ marks the active dialog)."""
    mark = "▶" if item.get("active") else " "
    parts = [
        display_title(item),
        when(item.get("last_active_at"), now),
        plural(int(item.get("message_count") or 0), "message"),
        str(item.get("dialog_id") or ""),
    ]
    return f"{mark} " + " · ".join(p for p in parts if p)


def listing(items: list[dict[str, Any]], has_more: bool) -> str:
    """A typed ``/sessions`` answer as transcript text: one line per dialog, ▶ the active one."""
    lines = [
        f"{'▶' if i.get('active') else ' '} {i.get('dialog_id')}  {display_title(i)}"
        f"  ({plural(int(i.get('message_count') or 0), 'message')})"
        for i in items
    ]
    more = "\n(more: F2 lists every dialog)" if has_more else ""
    return "Your dialogs (/switch <id>):\n" + ("\n".join(lines) or "none") + more
