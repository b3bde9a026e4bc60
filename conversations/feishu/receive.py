"""Receiving a Feishu message: validate, record once, acknowledge, then act (FEISHU.md §3, §6).

Both modes (the webhook view and the long connection) hand each verified event to
:meth:`FeishuReceiver.receive`. It never runs the agent: it parses the event, records the message
durably — unique on app + message id, so a redelivery (concurrent, after a restart, hours later)
starts nothing — puts a plain text message into its dialog's inbox in the same transaction, wakes
a worker and returns, well inside the platform's 3 s. Commands and messages with images stay
``received`` and are handled right after the acknowledgement (:meth:`FeishuReceiver.process`);
a process that dies first leaves them to the next scan (``FeishuPlatform``'s recovery loop). A
command is marked answered before it runs: its effect happens at most once, its answers are best
effort.

``receive`` raises only when the message could not be recorded: the webhook then answers 500
and the long connection acks 500, so the platform delivers it again — which is what we want.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from conversations.agent.inbound import InboundMessage, ReplyTo
from conversations.agent.media import IMAGE_SIGNATURES, MAX_MEDIA_ITEMS, MediaError, validate_media
from conversations.feishu import store
from conversations.feishu.commands import run_command
from conversations.feishu.events import (
    NOT_MENTIONED,
    FeishuMessageEvent,
    IgnoredEvent,
    is_command,
    is_group_event,
    parse_event,
)
from conversations.models import FeishuMessage, now_ms
from conversations.runtime.agent_channel import wake_dialog
from conversations.storage.runner import run_storage
from delivery.platforms.feishu.api import FeishuError

if TYPE_CHECKING:
    from conversations.feishu.platform import FeishuPlatform

__all__ = ["CHANNEL", "BotUnknownError", "FeishuReceiver"]

log = logging.getLogger(__name__)

CHANNEL = "feishu"
INBOX_FULL_TEXT = "Too many messages are waiting in this dialog; send this one again when the answers came."
UNSUPPORTED_TEXT = "I can read text, rich text and images; this message ({kind}) is not something I can read."
IMAGE_FAILED_TEXT = "(an image of this message could not be loaded)"


class BotUnknownError(Exception):
    """A group message arrived while the bot's own open_id is unknown: it cannot be told whether
    the bot was mentioned, so the message is not recorded and the platform should deliver it again."""


class FeishuReceiver:
    """Turns verified events into recorded messages, inbox rows and command answers.

    Args:
        platform: The configured Feishu platform (its API client, bot identity, dispatcher).
        clock_ms: The wall clock in ms (tests move it to redeliver "hours later").
    """

    def __init__(self, platform: FeishuPlatform, *, clock_ms: Callable[[], int] = now_ms) -> None:
        self.platform = platform
        self.clock_ms = clock_ms

    async def receive(self, event: dict[str, Any]) -> str:
        """Handles one verified event; returns what became of it (for logs and tests):
        ``"ignored: <why>"``, ``"duplicate"``, ``"accepted"``, ``"refused"`` or ``"pending"``.

        Raises:
            DatabaseError: the message could not be recorded (the platform should redeliver).
            BotUnknownError: a group message while the bot's identity is unknown (the same).
        """
        # Only a group message needs the bot's identity (is it mentioned?): a p2p message never
        # waits for the bot info API, which may be slow or down.
        bot_open_id = await self.platform.bot_open_id() if is_group_event(event) else None
        parsed = parse_event(event, bot_open_id=bot_open_id)
        if isinstance(parsed, IgnoredEvent) and parsed.reason == NOT_MENTIONED and bot_open_id is None:
            # Whether the bot is mentioned cannot be told yet: let the platform deliver it again.
            raise BotUnknownError("the bot's open_id is not known yet (bot info API unavailable)")
        if isinstance(parsed, IgnoredEvent):
            log.debug("feishu event %s ignored: %s", parsed.event_type, parsed.reason)
            return f"ignored: {parsed.reason}"
        config = self.platform.config
        age_ms = self.clock_ms() - parsed.create_time_ms
        ignore = None
        if (
            config.max_event_age_hours
            and parsed.create_time_ms
            and age_ms > config.max_event_age_hours * 3_600_000
        ):
            ignore = f"first received {age_ms / 3_600_000:.1f} h after it was sent"
        elif config.allowed_chats and parsed.chat_id not in config.allowed_chats:
            ignore = "chat not in PICOBOT_FEISHU_ALLOWED_CHATS"
        unsupported = ignore is None and bool(parsed.unsupported)
        if unsupported:
            ignore = f"message type {parsed.unsupported!r} not handled"
        direct = ignore is None and not is_command(parsed.text) and not parsed.image_keys
        recorded = await run_storage(
            store.record_message,
            {
                "app_id": parsed.app_id or config.app_id,
                "message_id": parsed.message_id,
                "event_id": parsed.event_id,
                "chat_id": parsed.chat_id,
                "chat_type": parsed.chat_type,
                "sender_open_id": parsed.sender_open_id,
                "sent_at": parsed.create_time_ms,
                "event": dataclasses.asdict(parsed),
            },
            ignore=ignore,
            inbound=self.inbound(parsed) if direct else None,
        )
        if recorded.duplicate:
            log.info("feishu message %s delivered again: already %s", parsed.message_id, recorded.status)
            return "duplicate"
        if ignore is not None:
            log.info("feishu message %s not answered: %s", parsed.message_id, ignore)
            if unsupported:
                await self.platform.notify(
                    parsed.chat_id,
                    "info",
                    UNSUPPORTED_TEXT.format(kind=parsed.unsupported),
                    key=f"{parsed.message_id}:unsupported",
                    reply_to=parsed.message_id,
                )
            return f"ignored: {ignore}"
        if recorded.accepted is not None:
            await self._accepted(parsed, recorded)
            return "accepted"
        if recorded.status == FeishuMessage.Status.REFUSED:
            await self._refused(parsed)
            return "refused"
        self.platform.spawn(self.process(recorded.row_id), name=f"feishu message {parsed.message_id}")
        return "pending"

    def inbound(self, event: FeishuMessageEvent, media: list[dict] | None = None) -> InboundMessage:
        """The normalised message (seed 000 §10.1): chat = the Feishu chat, sender = the open_id,
        ``reply_to`` = the message itself (answers reply to it); the rest opaque."""
        return InboundMessage(
            channel=CHANNEL,
            chat_id=event.chat_id,
            sender_id=event.sender_open_id,
            content=event.text,
            received_at=self.clock_ms(),
            media=tuple(media or ()),
            reply_to=ReplyTo(event.message_id),
            channel_context={
                "message_id": event.message_id,
                "chat_type": event.chat_type,
                "app_id": event.app_id,
                **({"thread_id": event.thread_id} if event.thread_id else {}),
            },
        )

    async def process(self, row_id: int | None = None, *, event: dict | None = None) -> None:
        """Handles a ``received`` row after the acknowledgement: a command is answered, a message
        with images gets them fetched and goes into its dialog's inbox. Claims the row first (a
        row another process handles is skipped). Never raises (errors are logged; an unclaimed
        row is retried by the recovery scan)."""
        try:
            rows = [event] if event is not None else await run_storage(store.claim_received, row_id)
            for row in rows:
                await self._process_row(row)
        except Exception:
            log.exception("feishu message row %s could not be handled (retried by the scan)", row_id)

    async def _process_row(self, row: dict) -> None:
        event = FeishuMessageEvent(**{**row["event"], "image_keys": tuple(row["event"]["image_keys"])})
        if is_command(event.text):
            # At most once from here: a command's effect (/new, /delete) must never repeat, so the
            # row is marked before it runs; a crash before this line leaves it to the scan.
            await run_storage(store.finish_received, row["id"], FeishuMessage.Status.ANSWERED)
            await run_command(event.chat_id, event.message_id, event.text, self.platform.dispatcher())
            return
        media, missing = await self._fetch_images(event)
        text = event.text
        if missing:
            text = f"{text}\n\n{IMAGE_FAILED_TEXT}".strip()
        recorded = await run_storage(
            store.accept_received, row["id"], dataclasses.replace(self.inbound(event, media), content=text)
        )
        if recorded.accepted is not None:
            await self._accepted(event, recorded)
        elif recorded.status == FeishuMessage.Status.REFUSED:
            await self._refused(event)

    async def _fetch_images(self, event: FeishuMessageEvent) -> tuple[list[dict], int]:
        """The message's images as validated media ``[{mime_type, data}]`` and how many failed."""
        media: list[dict] = []
        missing = 0
        for key in event.image_keys[:MAX_MEDIA_ITEMS]:
            try:
                data, _ = await self.platform.api.get_resource(event.message_id, key, "image")
            except FeishuError as exc:
                log.warning("feishu image %s of %s not fetched: %s", key, event.message_id, exc)
                missing += 1
                continue
            mime = next((m for m, check in IMAGE_SIGNATURES.items() if check(data)), None)
            item = {"mime_type": mime or "", "data": base64.b64encode(data).decode("ascii")}
            try:
                media.extend(validate_media([*media, item])[len(media) :])
            except MediaError as exc:
                log.warning("feishu image %s of %s refused: %s", key, event.message_id, exc)
                missing += 1
        missing += max(0, len(event.image_keys) - MAX_MEDIA_ITEMS)
        return media, missing

    async def _accepted(self, event: FeishuMessageEvent, recorded: store.Recorded) -> None:
        accepted = recorded.accepted
        assert accepted is not None
        await wake_dialog(accepted.session_id)
        if accepted.replaced_dialog is not None and accepted.created_dialog is not None:
            from conversations.chat.commands import idle_reset_notice

            notice = idle_reset_notice(accepted.created_dialog, accepted.replaced_dialog)
            await self.platform.notify(
                event.chat_id, "info", notice["content"], key=f"{event.message_id}:idle"
            )

    async def _refused(self, event: FeishuMessageEvent) -> None:
        await self.platform.notify(
            event.chat_id,
            "warning",
            INBOX_FULL_TEXT,
            key=f"{event.message_id}:full",
            reply_to=event.message_id,
        )
