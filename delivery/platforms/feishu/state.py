"""What a Feishu answer's sink keeps: where the answer goes and what was sent (FEISHU.md §9, §11).

:class:`CardState` is JSON-ready and saved on the answer's row (``conversations.feishu``) before
every call that uses a new ``sequence`` and after every confirmed step, so a sink rebuilt from it
continues on the same card with the same uuids. Pure: no Django, Channels or HTTP client imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["CardState", "CardStateStore", "FeishuTarget"]


@dataclass(frozen=True, slots=True)
class FeishuTarget:
    """Where a turn's answer goes.

    Attributes:
        turn_id: The turn (the prefix of every uuid).
        chat_id: The chat (``oc_…``), for sends when there is nothing to reply to.
        reply_to: The user's message (``om_…``): the card and every part reply to it, in groups
            too. None sends to the chat.
    """

    turn_id: str
    chat_id: str
    reply_to: str | None = None


@dataclass(slots=True)
class CardState:
    """What was sent for one turn; JSON-ready (``dataclasses.asdict`` / ``CardState(**saved)``).

    Attributes:
        card_id: The CardKit entity, once created.
        message_id: The card's message, once sent (None while the send's outcome is unknown).
        sequence: The last CardKit ``sequence`` used on the card (saved before it is used).
        streaming_enabled_at: The sink's clock (seconds) when streaming was last enabled.
        dead: The card can no longer change (or could not be opened): the final goes as messages.
        final_delivered: The platform confirmed the whole final.
        parts_sent: How many follow-up parts (part 2 onwards) the platform confirmed.
        card_final: Part 1 of the final is on the card and its streaming was closed.
        final_message_id: The message holding part 1 when the final went as new messages.
        final_text: The final as first attempted: every later attempt (a retry, the plain
            fallback, a recovery after a crash) delivers exactly this text.
    """

    card_id: str | None = None
    message_id: str | None = None
    sequence: int = 0
    streaming_enabled_at: float | None = None
    dead: bool = False
    final_delivered: bool = False
    parts_sent: int = 0
    card_final: bool = False
    final_message_id: str | None = None
    final_text: str | None = None


class CardStateStore(Protocol):
    """Persists a turn's :class:`CardState` (e.g. on its ``FeishuMessage`` row). Raising stops
    the step that wanted to save (the call is not made)."""

    async def save(self, turn_id: str, state: CardState) -> None: ...
