"""The normalised inbound user message (seed 000 §10.1), the same for every channel.

Pure: no Django. A platform adapter (the cli_chat consumer, the REST API, Feishu) builds one
``InboundMessage`` per user message; the core stores its sender, receive time and typed
``reply_to`` as the user row's ``source`` (seed 000 §10.2) and passes ``channel_context`` through
unread to the turn's sink — the core never interprets platform keys.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def is_blank(text: str) -> bool:
    """Whether ``text`` shows nothing: only whitespace and invisible format characters (zero-width
    space U+200B, joiners, word joiner, BOM — Unicode category Cf). Such a message is refused on
    every channel, as an empty one is; so is a client-chosen id (``client_msg_id``) like ``" "``."""
    return all(c.isspace() or unicodedata.category(c) == "Cf" for c in text)


@dataclass(frozen=True)
class ReplyTo:
    """The message a user message answers (seed 000 §10.1: the one typed field read from context).

    ``message_id``: a history message id, or the platform's id of the quoted message.
    ``excerpt``: quoted text the platform supplied, if any (≤ 500 characters kept).
    """

    message_id: str
    excerpt: str | None = None

    def to_dict(self) -> dict:
        """JSON form stored in ``source.reply_to``."""
        return {"message_id": self.message_id, "excerpt": self.excerpt[:500] if self.excerpt else None}


@dataclass(frozen=True)
class InboundMessage:
    """One user message as a channel received it.

    Attributes:
        channel: The platform (``cli_chat``, ``feishu``, ``api``…).
        chat_id: The platform's chat (on cli_chat: the user's id).
        sender_id: The platform's sender id; stored in ``source.from_user_id``, never shown to
            clients (seed 000 §10.2).
        content: The text (slash commands are not InboundMessages).
        received_at: When the gateway received it, ms since the epoch (the user row's
            ``created_at``).
        media: Validated images ``[{mime_type, data}]``.
        reply_to: What it replies to, or None.
        channel_context: Opaque platform data for the turn's sink; never interpreted here.
        session_id: An explicit target dialog, or None for the chat's active dialog.
        client_msg_id: The client's idempotency key, or None.
    """

    channel: str
    chat_id: str
    sender_id: str
    content: str
    received_at: int
    media: tuple[dict, ...] = ()
    reply_to: ReplyTo | None = None
    channel_context: Mapping[str, Any] = field(default_factory=dict)
    session_id: str | None = None
    client_msg_id: str | None = None

    def source(self) -> dict:
        """The stored ``source`` of the user row: ``{kind, from_channel, from_user_id, reply_to}``."""
        return {
            "kind": "user_input",
            "from_channel": self.channel,
            "from_user_id": self.sender_id,
            "reply_to": self.reply_to.to_dict() if self.reply_to else None,
        }
