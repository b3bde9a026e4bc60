"""An MCP ``tools/call`` result as the text a tool result carries (pure; duck-typed on the SDK's
``CallToolResult`` so this module imports neither the SDK nor Django).

Text blocks are joined with newlines; an image, audio or binary resource is summarised as one
bracketed line (its type, MIME type and size — never its bytes); a resource link or text resource
names its URI (a text resource's text is included). A result with no content but structured
content is that JSON. ``is_error`` is reported, not raised: the caller makes it an error result.
"""

from __future__ import annotations

import json
from typing import Any

MAX_LINK_CHARS = 500


def result_text(result: Any) -> tuple[str, bool]:
    """``(text, is_error)`` of a ``CallToolResult``-shaped object.

    Raises:
        ValueError: ``result`` has no ``content`` list (not a tool result).
    """
    content = getattr(result, "content", None)
    if not isinstance(content, list):
        raise ValueError("the server's answer is not a tool result (no content list)")
    parts = [block_text(block) for block in content]
    text = "\n".join(part for part in parts if part)
    structured = getattr(result, "structured_content", None)
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False, default=str)
    return text, bool(getattr(result, "is_error", False))


def block_text(block: Any) -> str:
    """One content block as text (module docstring)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind in ("image", "audio"):
        return f"[{kind}: {_mime(block)}, {_decoded_size(getattr(block, 'data', ''))} bytes]"
    if kind == "resource_link":
        name = getattr(block, "name", "") or ""
        return f"[resource link: {_short(getattr(block, 'uri', ''))}{f' ({_short(name)})' if name else ''}]"
    if kind == "resource":
        resource = getattr(block, "resource", None)
        uri = _short(getattr(resource, "uri", ""))
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f"[resource: {uri}]\n{text}"
        return f"[resource: {uri}, {_mime(resource)}, {_decoded_size(getattr(resource, 'blob', ''))} bytes]"
    return f"[{_short(str(kind))} content]"


def _mime(item: Any) -> str:
    return _short(str(getattr(item, "mime_type", None) or "unknown type"), 100)


def _decoded_size(data: Any) -> int:
    """Bytes a base64 text decodes to (without decoding it)."""
    if not isinstance(data, str):
        return 0
    stripped = data.rstrip("=")
    return len(stripped) * 3 // 4


def _short(text: Any, limit: int = MAX_LINK_CHARS) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
