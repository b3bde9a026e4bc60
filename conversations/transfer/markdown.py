"""A readable Markdown transcript of exported dialogs (pure: no Django, no I/O).

:func:`markdown_dialog` turns one export dict (``export.dialog_to_dict``) into Markdown that no
content can break out of: contents, reasoning, summaries, tool arguments and results sit verbatim
in fenced code blocks longer than any backtick run inside; values shown inside a line are made
single-line and escaped. ``provider_state`` and media data are left out. :func:`ms_to_text` is
the one time format of the operator commands.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any


def ms_to_text(ms: int | None) -> str:
    """``ms`` since the epoch as ``YYYY-MM-DD HH:MM:SS UTC`` (``—`` for None)."""
    if ms is None:
        return "—"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fence(text: str, lang: str = "") -> str:
    """``text`` verbatim in a fenced code block whose fence is longer than any backtick run in it:
    no line of ``text`` can close it, and nothing inside is read as Markdown or HTML."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}\n"


_MD_PUNCTUATION = "\\`*_[]!#|~:+-"  # with <, >, & as entities: no emphasis, link, image, heading, autolink
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}


def _inline(value: object) -> str:
    """A value shown inside a line (title, owner, tool names and ids): one line, with HTML and
    Markdown syntax escaped, so it can neither start a heading or a speaker turn nor inject HTML,
    links or images."""
    text = " ".join(str(value).split())
    return "".join(_HTML.get(c, "\\" + c if c in _MD_PUNCTUATION else c) for c in text)


def _media_line(media: list) -> str:
    parts = []
    for item in media:
        if isinstance(item, dict):
            size = len(str(item.get("data", ""))) * 3 // 4
            parts.append(f"{_inline(item.get('mime_type', 'file'))}, {size // 1024 or 1} KiB")
    return f"*\\[{len(parts)} attachment(s): {'; '.join(parts)}\\]*\n\n" if parts else ""


def _details(summary: str, text: str) -> str:
    """A collapsible block; its text fenced, so a ``</details>`` inside cannot close it early."""
    return f"<details><summary>{summary}</summary>\n\n{_fence(text, 'text')}\n</details>\n\n"


def markdown_dialog(item: dict[str, Any]) -> str:
    """A readable transcript of one export dict (pure).

    Message contents, reasoning, summaries, tool arguments and results are shown verbatim in
    fenced code blocks (fences longer than any backtick run inside), so no content can forge a
    heading or a speaker turn, inject HTML or close a ``<details>`` block; the title and other
    values inside lines are made single-line and escaped. Reasoning goes into a collapsible
    ``<details>``; ``provider_state`` and media data are left out.
    """
    lines = [f"# {_inline(item.get('title') or 'Untitled')}\n\n"]
    deleted = f" · deleted {ms_to_text(item.get('deleted_at'))}" if item.get("deleted_at") else ""
    lines.append(
        f"{_inline(item.get('id'))} · owner {_inline(item.get('owner') or '—')} · "
        f"created {ms_to_text(item.get('created_at'))} · last active {ms_to_text(item.get('last_active_at'))} · "
        f"{len(item.get('messages', []))} messages{deleted}\n\n"
    )
    if item.get("summary"):
        lines.append(
            _details(f"Summary of messages 1–{_inline(item.get('summary_seq'))}", str(item["summary"]))
        )
    for m in item.get("messages", []):
        role = m.get("role")
        status = m.get("completion_status")
        marker = "" if status in (None, "completed") else f" · *{_inline(status)}*"
        when = ms_to_text(m.get("created_at"))
        seq = _inline(m.get("seq"))
        if role == "tool":
            error = " · **error**" if m.get("is_error") else ""
            lines.append(
                f"#### Tool result {_inline(m.get('tool_name') or '?')} ({_inline(m.get('tool_call_id') or '?')})"
                f" · \\#{seq} · {when}{error}{marker}\n\n"
            )
            lines.append(_fence(str(m.get("content") or ""), "text"))
            lines.append("\n")
            continue
        lines.append(f"## {'User' if role == 'user' else 'Assistant'} · \\#{seq} · {when}{marker}\n\n")
        if m.get("reasoning_content"):
            lines.append(_details("Reasoning", str(m["reasoning_content"])))
        lines.append(_media_line(m.get("media_refs") or []))
        if m.get("content"):
            lines.append(_fence(str(m["content"]), "text"))
            lines.append("\n")
        for call in m.get("tool_calls") or []:
            lines.append(f"**Tool call** {_inline(call.get('name'))} ({_inline(call.get('id'))})\n\n")
            if call.get("raw_arguments") is not None:
                lines.append("Arguments (not a JSON object, sent as-is):\n\n")
                lines.append(_fence(str(call["raw_arguments"])))
            else:
                lines.append(_fence(json.dumps(call.get("arguments"), ensure_ascii=False, indent=2), "json"))
            lines.append("\n")
    return "".join(lines)
