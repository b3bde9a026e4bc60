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
from typing import Any

PAGE_SIZE = 20  # dialogs per `sessions` request of the list (the server allows up to 100)


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


def listing(items: list[dict[str, Any]], has_more: bool) -> str:
    """A typed ``/sessions`` answer as transcript text: one line per dialog, ▶ the active one."""
    lines = [
        f"{'▶' if i.get('active') else ' '} {i.get('dialog_id')}  {i.get('title') or '(untitled)'}"
        f"  ({i.get('message_count', 0)} messages)"
        for i in items
    ]
    more = "\n(more: F2 lists every dialog)" if has_more else ""
    return "Your dialogs (/switch <id>):\n" + ("\n".join(lines) or "none") + more
