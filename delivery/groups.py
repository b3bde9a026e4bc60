"""Channel-layer group names for chats: the one helper every publisher and consumer uses.

Channels accepts group names of ASCII alphanumerics, hyphens, underscores and periods, shorter
than 100 characters (``BaseChannelLayer.require_valid_group_name``). Chat ids come from users and
platforms (e-mail-like ids, non-ASCII, very long ids), so odd ones are hashed.

Pure module: no Django or Channels imports.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["chat_group"]

_CHANNEL_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")
_CHAT_ID_RE = re.compile(r"[A-Za-z0-9_.-]+")
# The shape of a hashed id; a raw id of this shape is hashed too, so the two never collide.
_HASHED_RE = re.compile(r"_[0-9a-f]{40}")
_MAX_GROUP_CHARS = 99


def chat_group(channel: str, chat_id: str) -> str:
    """Returns the group every connection and sink of one chat shares.

    Args:
        channel: Platform name, e.g. ``"cli_chat"`` or ``"feishu"``.
        chat_id: The chat's id on that platform (any string).

    Returns:
        ``"chat.<channel>.<chat_id>"`` when that is a valid group name, else
        ``"chat.<channel>._<40 hex digits>"`` (SHA-256 of channel and chat id); a channel name
        that is itself odd becomes ``"x"`` in the hashed form. Distinct inputs give distinct
        names (barring hash collisions); always ≤ 99 characters.
    """
    if (
        _CHANNEL_RE.fullmatch(channel)
        and _CHAT_ID_RE.fullmatch(chat_id)
        and not _HASHED_RE.fullmatch(chat_id)
        and len(channel) + len(chat_id) + 6 <= _MAX_GROUP_CHARS
    ):
        return f"chat.{channel}.{chat_id}"
    digest = hashlib.sha256(f"{channel}\x00{chat_id}".encode("utf-8", "surrogatepass")).hexdigest()[:40]
    prefix = channel if _CHANNEL_RE.fullmatch(channel) else "x"
    return f"chat.{prefix}._{digest}"
