"""Complete messages to a Feishu chat: the outbound dispatcher's ``feishu`` sender (seed 003 §9.2).

Two kinds of message come here:

- a turn's one plain fallback (``OutboundMessage.turn_id`` set; seed 000 §5.2): it goes where
  the turn's answer goes — onto the turn's card when it has one, else as the answer's own
  message — through a sink rebuilt from the saved card state, with the same idempotency keys
  the turn's sink used. So a fallback after a final whose confirmation was lost (the platform
  applied it, the answer never came) cannot show a second answer: never zero, never two.
- everything else (notices, command answers): one text message per part, replying to
  ``reply_to`` when given, else sent to the chat, each with a ``uuid`` derived from the message's
  idempotency key (the platform keeps at most one message per uuid for an hour, FEISHU.md §7).

The sender is ``idempotent``: every call of one message carries the same uuids.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from delivery.outbound import OutboundMessage
from delivery.platforms.feishu.api import (
    PERMANENT_SEND_CODES,
    RECALLED_CODES,
    FeishuApiError,
    idempotency_uuid,
)
from delivery.platforms.feishu.cards import safe_text
from delivery.platforms.feishu.split import split_markdown
from delivery.sinks import SinkError

if TYPE_CHECKING:
    from delivery.platforms.feishu.api import FeishuApi
    from delivery.platforms.feishu.sink import FeishuTurnSink

__all__ = ["TEXT_BUDGET_BYTES", "FeishuSender"]

#: A text message is at most 150 KB (FEISHU.md §7); keep a margin for the JSON around it.
TEXT_BUDGET_BYTES = 100_000


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class FeishuSender:
    """Sends one :class:`OutboundMessage` to its Feishu chat; raises on failure.

    Args:
        api: The Open API client (``conversations.feishu.client.FeishuClient``).
        rebuild_sink: Rebuilds the sink of a turn from its saved state
            (``FeishuPlatform.sink_for_turn``), or returns None when the turn is not a tracked
            Feishu answer.

    Raises (from ``__call__``):
        SinkError: ``permanent=True`` for codes after which sending to the chat cannot succeed.
        FeishuError: anything else (the dispatcher retries: the uuids make it safe).
    """

    idempotent = True

    def __init__(
        self, api: FeishuApi, rebuild_sink: Callable[[str], Awaitable[FeishuTurnSink | None]]
    ) -> None:
        self._api = api
        self._rebuild_sink = rebuild_sink

    async def __call__(self, message: OutboundMessage) -> None:
        if message.turn_id:
            sink = await self._rebuild_sink(message.turn_id)
            if sink is not None:
                try:
                    await sink.deliver_final(message.text)
                finally:
                    await sink.close()
                return
        await self.send_text(message.chat_id, message.text, key=message.id, reply_to=message.reply_to)

    async def send_text(self, chat_id: str, text: str, *, key: str, reply_to: str | None = None) -> None:
        """Sends ``text`` as text message(s), split at 100 KB on line boundaries (FEISHU.md §7);
        ``<at`` tags are neutralised (``cards.safe_text``): a title or a quoted text never
        mentions anyone."""
        parts = split_markdown(safe_text(text, empty=" "), TEXT_BUDGET_BYTES, _utf8_len) or [" "]
        for index, part in enumerate(parts):
            uuid = idempotency_uuid(key if index == 0 else f"{key}:{index}")
            await self._send_one(chat_id, part, uuid=uuid, reply_to=reply_to)

    async def _send_one(self, chat_id: str, text: str, *, uuid: str, reply_to: str | None) -> None:
        content = {"text": text}
        try:
            if reply_to:
                try:
                    await self._api.reply_message(reply_to, "text", content, uuid=uuid)
                    return
                except FeishuApiError as exc:
                    if exc.code not in RECALLED_CODES:
                        raise
                # The message answered was recalled or deleted: to the chat, same uuid (FEISHU.md §10).
            await self._api.send_message(chat_id, "text", content, uuid=uuid)
        except FeishuApiError as exc:
            if exc.code in PERMANENT_SEND_CODES:
                raise SinkError(f"Feishu refused the message: {exc}", permanent=True) from exc
            raise
