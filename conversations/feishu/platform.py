"""The Feishu platform as the runtime sees it (``runtime.platforms.PlatformAdapter``), and its lifecycle.

One :class:`FeishuPlatform` per process, installed when ``PICOBOT_FEISHU_MODE`` is set
(``conversations.apps``): it owns the Open API client, the bot's identity (its open_id, for
mentions, from the bot info API), the receiver, an outbound dispatcher for the control path's
messages (command answers, notices), and — in the processes that run the agent worker (``serve``,
``runagent``: ``start()``/``stop()`` are called by the worker) — the recovery loop and, in the
long-connection mode, the SDK's client.

The recovery loop (every ``PICOBOT_FEISHU_RECOVERY_SECONDS``) makes a dead process's work finish elsewhere:
``received`` messages nobody handled (a command or images, recorded and acknowledged just before a
crash) are handled, and answers whose turn ended but whose final the platform never confirmed are
delivered again — onto their card, or as their own message with the same idempotency keys, so a
final the platform had already accepted is not shown twice (never zero, never two). Finals not
confirmed within the uuid hour are given up (a ``DeliveryFailure``); failures whose final reached
the user after all are marked resolved. Kept automation notices (a missed scheduled run, an
interrupted background task) the platform never confirmed are sent again the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from conversations import storage
from conversations.feishu import store
from conversations.feishu.client import FeishuClient
from conversations.feishu.receive import FeishuReceiver
from conversations.feishu.sender import FeishuSender
from conversations.models import now_ms
from conversations.storage.runner import run_storage
from delivery.coordinator import FINISH_BUDGET
from delivery.outbound import OutboundDispatcher, OutboundMessage
from delivery.platforms.feishu.api import FeishuError
from delivery.platforms.feishu.sink import FeishuTurnSink
from delivery.platforms.feishu.state import CardState, FeishuTarget
from delivery.presentation import PresentationPolicy
from delivery.sinks import SinkError

__all__ = ["FeishuConfig", "FeishuPlatform", "current", "install", "uninstall"]

log = logging.getLogger(__name__)

#: A ``received`` row this old was not handled by the process that got it (a command, images).
RECEIVED_GRACE_MS = 10_000
#: Finals are delivered again for this long after their turn ended: within the platform's one-hour
#: uuid de-duplication (FEISHU.md §7), so a resend never shows a second message.
FINAL_MAX_AGE_MS = 55 * 60_000
#: Unconfirmed kept notices one scan sends again at most, oldest first.
NOTICES_PER_SCAN = 200
#: The receive path answers within the platform's 3 s (FEISHU.md §3): the bot info call gets this much.
BOT_INFO_SECONDS = 1.5
INTERRUPTED_TEXT = (
    "⚠️ This answer was interrupted by a server restart; send your message again if you still need it."
)


@dataclass(frozen=True)
class FeishuConfig:
    """The ``PICOBOT_FEISHU_*`` settings (``picobot_site.config``), secrets as plain strings."""

    mode: str
    app_id: str
    app_secret: str
    verification_token: str
    encrypt_key: str
    api_base: str = "https://open.feishu.cn"
    streaming: str = "card"
    allowed_chats: tuple[str, ...] = ()
    max_event_age_hours: float = 12.0
    recovery_seconds: float = 15.0

    @classmethod
    def from_settings(cls, picobot: Any) -> FeishuConfig:
        return cls(
            mode=picobot.feishu_mode or "",
            app_id=picobot.feishu_app_id,
            app_secret=picobot.feishu_app_secret.get_secret_value(),
            verification_token=picobot.feishu_verification_token.get_secret_value(),
            encrypt_key=picobot.feishu_encrypt_key.get_secret_value(),
            api_base=picobot.feishu_api_base.rstrip("/"),
            streaming=picobot.feishu_streaming,
            allowed_chats=tuple(picobot.feishu_allowed_chats),
            max_event_age_hours=picobot.feishu_max_event_age_hours,
            recovery_seconds=picobot.feishu_recovery_seconds,
        )

    def __repr__(self) -> str:  # never the secrets
        return f"FeishuConfig(mode={self.mode!r}, app_id={self.app_id!r}, api_base={self.api_base!r})"


class _CardStore:
    """The sink's ``CardStateStore`` for one answer: its ``FeishuMessage`` row (by inbox row)."""

    def __init__(self, inbox_id: str) -> None:
        self.inbox_id = inbox_id

    async def save(self, turn_id: str, state: CardState) -> None:
        await run_storage(
            store.save_card_state, self.inbox_id, dataclasses.asdict(state), delivered=state.final_delivered
        )


class FeishuPlatform:
    """The Feishu channel of this process. See the module docstring.

    Args:
        config: The settings.
        api: The Open API client (default: a :class:`FeishuClient` for ``config``).
    """

    channel = "feishu"
    presentation = PresentationPolicy.external()  # reasoning hidden, tools compact (seed 003 §11)

    def __init__(self, config: FeishuConfig, *, api: Any = None) -> None:
        self.config = config
        self.api = api or FeishuClient(config.api_base, config.app_id, config.app_secret)
        self.sender = FeishuSender(self.api, self.sink_for_turn)
        self.receiver = FeishuReceiver(self)
        self._dispatcher: OutboundDispatcher | None = None
        self._bot_open_id: str | None = None
        self._bot_lock: asyncio.Lock | None = None
        self._tasks: set[asyncio.Task] = set()
        self._scan: asyncio.Task | None = None
        self._notices_in_flight: set[str] = set()  # keys queued in this process, not ended yet
        self.long_connection: Any = None
        # An answer whose turn ended this long ago and whose final is still not confirmed is
        # delivered again by the scan: two periods after the live process's own retries ended
        # (a slow process is not dead; two deliveries racing on one card could show it twice).
        self.settled_ms = int(1_000 * (FINISH_BUDGET + 2 * config.recovery_seconds))

    # --- identity --------------------------------------------------------------------------
    async def bot_open_id(self, timeout: float = BOT_INFO_SECONDS) -> str | None:
        """The bot's open_id (mentions in groups), from the bot info API once; None while it
        cannot be had within ``timeout`` seconds (asked again next time)."""
        if self._bot_open_id is None:
            self._bot_lock = self._bot_lock or asyncio.Lock()
            try:
                async with asyncio.timeout(timeout), self._bot_lock:
                    if self._bot_open_id is None:
                        self._bot_open_id = str((await self.api.bot_info()).get("open_id") or "") or None
            except (FeishuError, TimeoutError) as exc:
                log.warning("feishu bot info unavailable: %s", exc or type(exc).__name__)
        return self._bot_open_id

    # --- runtime.platforms.PlatformAdapter -------------------------------------------------
    async def open_sink(self, start: Any) -> FeishuTurnSink:
        """The turn's sink, replying to the user's message; its card state persists on the
        message's ``FeishuMessage`` row (nothing is sent before the first visible snapshot)."""
        target = await run_storage(store.reply_target, start.inbox_id)
        reply_to = (target or {}).get("message_id") or start.channel_context.get("message_id")
        return self._sink(start.turn_id, start.chat_id, reply_to, start.inbox_id, (target or {}).get("card"))

    def _sink(
        self, turn_id: str, chat_id: str, reply_to: str | None, inbox_id: str, card: dict | None
    ) -> FeishuTurnSink:
        state = CardState(**card) if card else None
        return FeishuTurnSink(
            self.api,
            FeishuTarget(turn_id=turn_id, chat_id=chat_id, reply_to=reply_to),
            _CardStore(inbox_id),
            streaming=self.config.streaming == "card",
            state=state,
        )

    async def sink_for_turn(self, turn_id: str) -> FeishuTurnSink | None:
        """A sink for ``turn_id`` rebuilt from its saved state (fallback, recovery), or None when
        the turn did not answer a Feishu message."""
        target = await run_storage(store.turn_target, turn_id)
        if target is None:
            return None
        return self._sink(
            turn_id, target["chat_id"], target["message_id"], target["inbox_id"], target["card"]
        )

    def dispatcher(self) -> OutboundDispatcher:
        """The control path's ordered outbound dispatcher (command answers, notices)."""
        if self._dispatcher is None:
            self._dispatcher = OutboundDispatcher({self.channel: self.sender})
        return self._dispatcher

    async def notify(
        self,
        chat_id: str,
        level: str,
        content: str,
        *,
        key: str,
        session_id: str | None = None,
        reply_to: str | None = None,
        on_settled: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Queues a notice for the chat (sent once per ``key``); never waits for it, never raises.

        ``on_settled`` runs (in the background) once the platform confirmed the message, or
        refused it for good (``OutboundResult.permanent``: sending it again cannot help).
        """
        message = OutboundMessage(
            self.channel, chat_id, content, level=level, session_id=session_id, id=key, reply_to=reply_to
        )
        try:
            future = self.dispatcher().submit(message)
        except Exception as exc:
            log.warning("feishu notice to %s not queued: %s", chat_id, exc)
            return
        self._notices_in_flight.add(key)
        future.add_done_callback(lambda f: self._notice_done(f, chat_id, key, on_settled))

    def _notice_done(
        self,
        future: asyncio.Future,
        chat_id: str,
        key: str,
        on_settled: Callable[[], Awaitable[None]] | None,
    ) -> None:
        self._notices_in_flight.discard(key)
        if future.cancelled():
            return
        result = future.result()
        if result.ok is False:
            log.warning(
                "feishu notice to %s not sent%s: %s",
                chat_id,
                " (refused for good: not sent again)" if result.permanent else "",
                result.error,
            )
        elif result.ok is None:
            log.warning("feishu notice to %s may not have been sent: %s", chat_id, result.error)
        if on_settled is not None and (result.ok or result.permanent):
            self.spawn(_run_callback(on_settled, key), name=f"feishu notice settled {key}")

    async def interrupted(self, turn: dict, answer: str) -> None:
        """A turn that died with its process gets its one final where its answer was shown (in
        the background: the executor that took the dialog over goes on at once)."""
        self.spawn(
            self._deliver_again(turn["turn_id"], answer, "failed", ""), name=f"feishu final {turn['turn_id']}"
        )

    async def _deliver_again(self, turn_id: str, answer: str, outcome: str, error: str) -> None:
        inbox_id = None
        try:
            sink = await self.sink_for_turn(turn_id)
            if sink is None:
                return
            inbox_id = sink.store.inbox_id if isinstance(sink.store, _CardStore) else None
            try:
                await sink.deliver_final(final_text(answer, outcome, error))
            finally:
                await sink.close()
        except SinkError as exc:
            if not exc.permanent or inbox_id is None:
                log.warning(
                    "feishu final of turn %s not delivered yet (retried by the scan): %s", turn_id, exc
                )
                return
            log.error("feishu final of turn %s refused for good: %s", turn_id, exc)
            await run_storage(store.give_up_final, inbox_id, str(exc))
        except Exception as exc:
            log.warning("feishu final of turn %s not delivered yet (retried by the scan): %s", turn_id, exc)

    # --- lifecycle (the worker's processes) ------------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, None], *, name: str) -> None:
        """Runs ``coro`` in the background, owned by the platform (cancelled by ``stop``)."""
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self) -> None:
        """Learns the bot's identity, starts the recovery loop and, in the long-connection mode,
        the SDK client. Never raises for the platform being unreachable (it is retried)."""
        await self.bot_open_id()
        if self._scan is None:
            self._scan = asyncio.ensure_future(self._scan_loop())
        if self.config.mode == "long_connection" and self.long_connection is None:
            from conversations.feishu.long_connection import LongConnection

            self.long_connection = LongConnection(
                self.config.app_id,
                self.config.app_secret,
                domain=self.config.api_base,
                on_event=self.receive_raw,
                loop=asyncio.get_running_loop(),
            )
            self.long_connection.start()

    async def stop(self, timeout: float = 5.0) -> None:
        """Stops the long connection, the scan and background work, drains the dispatcher."""
        if self.long_connection is not None:
            await asyncio.to_thread(self.long_connection.stop, timeout)
            self.long_connection = None
        for task in [t for t in (self._scan, *self._tasks) if t is not None]:
            task.cancel()
        pending = [t for t in (self._scan, *self._tasks) if t is not None]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        self._scan = None
        if self._dispatcher is not None:
            await self._dispatcher.close(timeout)
            self._dispatcher = None
        if self._tasks:  # what the drained sends started: recording a notice as sent
            await asyncio.wait(list(self._tasks), timeout=timeout)
        close = getattr(self.api, "aclose", None)
        if close is not None:
            await close()

    async def receive_raw(self, payload: bytes) -> None:
        """The long connection's handler: one event's JSON bytes (already authenticated).

        Raises only when the message could not be recorded (the SDK then acks 500 and the
        platform delivers it again); a body that is not JSON is logged and acknowledged.
        """
        try:
            event = json.loads(payload)
        except ValueError:
            log.warning(
                "feishu long connection: an event that is not JSON was ignored (%d bytes)", len(payload)
            )
            return
        await self.receiver.receive(event)

    async def scan_once(self) -> None:
        """One round of the recovery loop (see the module docstring)."""
        for row in await run_storage(store.claim_received, older_than_ms=RECEIVED_GRACE_MS):
            await self.receiver.process(event=row)
        finals = await run_storage(
            store.claim_undelivered_finals, settled_ms=self.settled_ms, max_age_ms=FINAL_MAX_AGE_MS
        )
        for row in finals:
            if row["turn_id"]:
                await self._deliver_again(row["turn_id"], row["answer"], row["outcome"], row["error"])
        await self._notify_again()
        if await run_storage(store.give_up_finals, max_age_ms=FINAL_MAX_AGE_MS):
            log.error("feishu: finals not confirmed within the uuid hour were given up (see DeliveryFailure)")
        # A failure whose final reached the user after all is no loss: the admin shows it resolved.
        await run_storage(store.resolve_delivered_failures, since_ms=2 * FINAL_MAX_AGE_MS)

    async def _notify_again(self) -> None:
        """Sends again the automation notices (a missed scheduled run, an interrupted task) the
        platform never confirmed: the live send failed, or its process died with it queued.

        Only notices made between the settle time (the live send's own retries are over) and
        the uuid hour (the same key shows one message however often it is sent)."""
        now = now_ms()
        notices = await run_storage(
            storage.unsent_platform_notices,
            self.channel,
            made_after=now - FINAL_MAX_AGE_MS,
            made_before=now - self.settled_ms,
            limit=NOTICES_PER_SCAN,
        )
        for item in notices:
            if item["id"] in self._notices_in_flight:
                continue
            await self.notify(
                item["chat_id"],
                item["level"],
                item["content"],
                key=item["id"],
                session_id=item["session_id"],
                on_settled=functools.partial(run_storage, storage.mark_automation_notices_sent, [item["id"]]),
            )

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.recovery_seconds)
            try:
                await self.scan_once()
            except Exception:
                log.exception(
                    "feishu recovery scan failed (tried again in %.0f s)", self.config.recovery_seconds
                )


async def _run_callback(callback: Callable[[], Awaitable[None]], key: str) -> None:
    try:
        await callback()
    except Exception:
        log.warning("feishu notice %s settled but could not be recorded so", key, exc_info=True)


def final_text(answer: str, outcome: str, error: str) -> str:
    """The final of a turn delivered again from what history kept: its answer, and what went wrong."""
    answer = answer.strip()
    if outcome == "failed":
        note = INTERRUPTED_TEXT if not error or "interrupted" in error else f"⚠️ This answer failed: {error}"
        return f"{answer}\n\n{note}" if answer else note
    if outcome == "cancelled":
        return f"{answer}\n\n⏹ Stopped." if answer else "⏹ Stopped."
    return answer or "The model returned no answer."


_platform: FeishuPlatform | None = None


def install(platform: FeishuPlatform) -> FeishuPlatform:
    """Makes ``platform`` this process's Feishu channel and registers it with the runtime."""
    from conversations.runtime import platforms

    global _platform
    _platform = platform
    platforms.register(platform)
    return platform


def uninstall() -> None:
    """Forgets the process's Feishu channel (tests)."""
    from conversations.runtime import platforms

    global _platform
    _platform = None
    platforms.unregister(FeishuPlatform.channel)


def current() -> FeishuPlatform | None:
    """This process's Feishu channel, or None when Feishu is off."""
    return _platform
