"""The Feishu turn sink: one streaming card per answer, exactly one final (FEISHU.md §7–§11).

One :class:`FeishuTurnSink` per turn (seed 003 §10.1, §10.3). Nothing is sent until the turn
shows something; then a CardKit card (``cards.streaming_card``) is created and sent once, replying
to the user's message (``uuid = "<turn>:card"``), and each running update sets its answer
element's full text (FEISHU.md §9). The final (:meth:`FeishuTurnSink.deliver_final`) is split
into parts (``split.split_markdown``): part 1 goes onto the card, which is then closed; parts
2.. follow as ``post`` messages (one Markdown paragraph each, ``"<turn>:part<i>"``). Without a usable card — nothing was
ever shown, ``streaming=False``, the card could not be opened, or it can no longer change
(``CANNOT_UPDATE_CODES``) — the whole final goes as new messages (``"<turn>:final"``, then the
part uuids). Every message carries a uuid derived from the turn and every card call a fresh
``sequence``, so a retried or repeated final shows once: never zero, never two (FEISHU.md §11).

Errors (``update``: any failure but a rate limit raises, the coordinator drops it;
``finish``/``deliver_final``)::

    SinkError(permanent=True)   the chat refuses messages (PERMANENT_SEND_CODES, TOO_LARGE_CODES)
    FeishuTransportError        no answer: the call may have been applied; call finish again
    FeishuApiError              anything else that a retry may fix (5xx, rate limit past max_wait)

The sink's :class:`CardState` is saved through a :class:`CardStateStore` before every call that
uses a new sequence and after every confirmed step, so a sink rebuilt from it (``state=``, crash
recovery, the session's plain fallback) continues on the same card with the same uuids.

Pure: no Django, Channels or HTTP client imports.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from delivery.platforms.feishu.api import (
    CANNOT_UPDATE_CODES,
    PERMANENT_SEND_CODES,
    RECALLED_CODES,
    SEQUENCE_CODE,
    STREAMING_CLOSED_CODES,
    TOO_LARGE_CODES,
    UUID_REUSED_CODE,
    FeishuApiError,
    FeishuError,
    idempotency_uuid,
    is_rate_limited,
    is_transient,
    retry_after_seconds,
)
from delivery.platforms.feishu.cards import (
    ANSWER_ELEMENT,
    CARD_TEXT_BUDGET,
    card_reference,
    has_visible_content,
    post_content,
    render_final,
    render_markdown,
    safe_text,
    streaming_card,
    text_size,
)
from delivery.platforms.feishu.split import split_markdown
from delivery.platforms.feishu.state import CardState, CardStateStore, FeishuTarget
from delivery.sinks import FinalOnly, LivePolicy, SinkError, Snapshot

if TYPE_CHECKING:
    from delivery.platforms.feishu.api import FeishuApi
    from delivery.presentation import PresentedSnapshot

__all__ = ["REENABLE_AFTER", "CardState", "CardStateStore", "FeishuTarget", "FeishuTurnSink"]

logger = logging.getLogger(__name__)

#: Seconds after streaming was enabled when it is re-enabled: it closes itself at 10 min (§9).
REENABLE_AFTER = 540.0
#: How far the sequence jumps after a 300317/200770: the saved counter may lag behind one a
#: concurrent sink of the same turn used (a finish that timed out while its call was in flight).
SEQUENCE_SKIP = 64


class _CardDead(Exception):
    """The card cannot show the final: deliver it as new messages."""


class FeishuTurnSink:
    """The :class:`~delivery.sinks.TurnSink` of one Feishu answer (module docstring).

    Args:
        api: The Open API (``FeishuApi``).
        target: Chat, turn and the message answered.
        store: Where the card state is saved (None: nowhere).
        streaming: False shows only the final (``FinalOnly``; no card entity).
        min_interval: Seconds between running updates (the coordinator's throttle).
        clock: Seconds, monotonic (streaming window, rate-limit backoff).
        sleep: Awaited to wait out a rate limit during the final.
        max_wait: Seconds one final may spend waiting for rate limits (the coordinator allows a
            ``finish`` 10 s); past it the rate-limit error is raised and ``finish`` retried.
        state: A saved state to continue from (a rebuilt sink); a new one when None.
    """

    def __init__(
        self,
        api: FeishuApi,
        target: FeishuTarget,
        store: CardStateStore | None,
        *,
        streaming: bool = True,
        min_interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        max_wait: float = 8.0,
        state: CardState | None = None,
    ) -> None:
        self.api = api
        self.target = target
        self.store = store
        self.streaming = streaming
        self.live_policy: LivePolicy = Snapshot(min_interval) if streaming else FinalOnly()
        self.state = state if state is not None else CardState()
        self._clock = clock
        self._sleep = sleep
        self._max_wait = max_wait
        self._shown: str | None = None  # the running text the card was last confirmed to show
        self._backoff_until = float("-inf")
        self._recalled = False  # reply_to was recalled: send to the chat
        self._final = False  # inside deliver_final: wait out rate limits, give up on a bad card
        self._waited = 0.0

    # -- TurnSink ----------------------------------------------------------------------------

    async def update(self, snapshot: PresentedSnapshot, payload_json: str) -> None:
        """Shows a running snapshot on the card (opening it on the first visible one).

        Skipped (returns) while nothing is visible, while rate limited (until ``retry_after``),
        when the text did not change, or once the card is dead.

        Raises:
            SinkError: The card could not be opened or can no longer change (it is marked dead).
            FeishuError: Any other failure (the coordinator logs it; a newer snapshot follows).
        """
        state = self.state
        if not self.streaming or state.dead or state.card_final or state.final_delivered:
            return
        if not has_visible_content(snapshot) or self._clock() < self._backoff_until:
            return
        text = render_markdown(snapshot)
        if text == self._shown:
            return
        try:
            if state.message_id is None:
                await self._open_card(text)
            else:
                await self._set_content(text)
        except FeishuApiError as exc:
            if not is_rate_limited(exc):
                raise
            self._backoff_until = self._clock() + retry_after_seconds(exc)
            logger.debug("turn %s: Feishu rate limit, running updates paused: %s", self.target.turn_id, exc)
        except _CardDead as exc:
            raise SinkError(f"the Feishu card cannot be updated: {exc}") from exc

    async def finish(self, snapshot: PresentedSnapshot, payload_json: str) -> None:
        """Delivers ``render_final(snapshot)``; see :meth:`deliver_final`."""
        await self.deliver_final(render_final(snapshot))

    async def close(self) -> None:
        """Releases nothing remote: a card whose final never came stays (the fallback's job)."""

    # -- the final ---------------------------------------------------------------------------

    async def deliver_final(self, text: str) -> None:
        """Delivers ``text`` as the turn's one final; idempotent, safe to call again after any error.

        Args:
            text: Markdown of any size (made safe; blank becomes ``NO_ANSWER_TEXT``). Only the
                first call's text counts (``CardState.final_text``): a retry or the fallback
                never shows another version of the answer.

        Returns:
            When the platform confirmed every part (at once when it already had).

        Raises:
            SinkError: ``permanent=True``: the chat refuses the message.
            FeishuTransportError: No answer from the platform; call again (same uuids, new sequence).
            FeishuApiError: A transient failure, or rate limited beyond ``max_wait``; call again.
        """
        state = self.state
        if state.final_delivered:
            return
        self._final, self._waited = True, 0.0
        try:
            if state.final_text is None:  # the first attempt fixes the final's text
                state.final_text = text
                await self._save()
            await self._wait_out_backoff()
            parts = _final_parts(state.final_text)
            on_card = state.card_id is not None and not state.dead
            if on_card:
                try:
                    await self._final_on_card(parts[0])
                except _CardDead as exc:
                    logger.info("turn %s: final goes as a new message: %s", self.target.turn_id, exc)
                    on_card = False
            if not on_card and state.final_message_id is None:
                if state.card_id is not None and state.message_id is not None:
                    await self._stop_streaming_quietly()  # the chat list stops saying "generating"
                state.final_message_id = await self._send_part(parts[0], "final")
                await self._save()
            for index in range(state.parts_sent + 1, len(parts)):
                await self._send_part(parts[index], f"part{index + 1}")
                state.parts_sent = index
                await self._save()
            state.final_delivered = True
            await self._save()
        finally:
            self._final = False

    async def _final_on_card(self, text: str) -> None:
        state = self.state
        if state.card_final:
            return
        if state.message_id is None:
            await self._send_card()
        await self._set_content(text)
        await self._set_streaming(False)
        state.card_final = True
        await self._save()

    async def _send_part(self, text: str, key: str) -> str:
        try:
            return await self._waiting(lambda: self._post("post", post_content(text), self._uuid(key)))
        except FeishuApiError as exc:
            if exc.code in PERMANENT_SEND_CODES or exc.code in TOO_LARGE_CODES:
                raise SinkError(f"Feishu refused the answer: {exc}", permanent=True) from exc
            raise

    async def _wait_out_backoff(self) -> None:
        delay = min(self._backoff_until - self._clock(), self._max_wait)
        if delay > 0:
            self._waited += delay
            await self._sleep(delay)

    # -- the card ----------------------------------------------------------------------------

    async def _open_card(self, text: str) -> None:
        state = self.state
        created = state.card_id is None
        if created:
            try:
                card_id = await self.api.create_card(streaming_card(text))
            except FeishuApiError as exc:
                raise await self._card_failed(exc, opening=True) from None
            state.card_id, state.sequence, state.streaming_enabled_at = card_id, 0, self._clock()
            await self._save()
        await self._send_card()
        if created:
            self._shown = text
        else:
            await self._set_content(text)  # a card sent late: bring it up to date

    async def _send_card(self) -> None:
        assert self.state.card_id is not None
        content = card_reference(self.state.card_id)
        try:
            message_id = await self._waiting(lambda: self._post("interactive", content, self._uuid("card")))
        except FeishuApiError as exc:
            raise await self._card_failed(exc, opening=True) from None
        self.state.message_id = message_id
        await self._save()

    async def _set_content(self, text: str) -> None:
        """Sets the answer element's full text (re-enabling streaming when its window ends)."""
        card_id = self.state.card_id
        assert card_id is not None

        async def stream(sequence: int, uuid: str) -> None:
            await self.api.stream_text(card_id, ANSWER_ELEMENT, text, sequence=sequence, uuid=uuid)

        if self._window_ending():
            await self._set_streaming(True)
        try:
            await self._card_call("s", stream)
        except FeishuApiError as exc:
            if exc.code not in STREAMING_CLOSED_CODES:
                raise await self._card_failed(exc) from None
            await self._set_streaming(True)  # once, then the same text again (§10)
            try:
                await self._card_call("s", stream)
            except FeishuApiError as again:
                raise await self._card_failed(again) from None
        self._shown = text

    async def _set_streaming(self, enabled: bool) -> None:
        card_id = self.state.card_id
        assert card_id is not None

        async def settings(sequence: int, uuid: str) -> None:
            await self.api.set_streaming(card_id, enabled, sequence=sequence, uuid=uuid)

        try:
            await self._card_call("m", settings)
        except FeishuApiError as exc:
            if not enabled and (exc.code in CANNOT_UPDATE_CODES or not is_transient(exc)):
                # Closed already, or the card cannot change any more: it shows the final the
                # platform just confirmed, and a retry cannot do better.
                logger.info("turn %s: card close answered %s; counted as closed", self.target.turn_id, exc)
                return
            raise await self._card_failed(exc) from None
        if enabled:
            self.state.streaming_enabled_at = self._clock()
            await self._save()

    async def _stop_streaming_quietly(self) -> None:
        """One attempt to switch a dead card's streaming off (it may have been re-enabled just
        before it died); whatever answers, the final goes on as new messages."""
        card_id = self.state.card_id
        assert card_id is not None
        self.state.sequence += 1
        sequence = self.state.sequence
        try:
            await self._save()
            await self.api.set_streaming(card_id, False, sequence=sequence, uuid=self._uuid(f"m{sequence}"))
        except FeishuError as exc:
            logger.debug("turn %s: a dead card's streaming stays on: %s", self.target.turn_id, exc)

    def _window_ending(self) -> bool:
        enabled_at = self.state.streaming_enabled_at
        if enabled_at is None:
            return True
        elapsed = self._clock() - enabled_at
        return elapsed < 0 or elapsed >= REENABLE_AFTER  # < 0: saved by another clock

    async def _card_call(self, kind: str, call: Callable[[int, str], Awaitable[None]]) -> None:
        """One CardKit call with a fresh sequence (saved first); a 300317 jumps it, retried once."""

        async def attempt() -> None:
            for last in (False, True):
                sequence = self.state.sequence + 1
                self.state.sequence = sequence
                await self._save()
                try:
                    await call(sequence, self._uuid(f"{kind}{sequence}"))
                    return
                except FeishuApiError as exc:
                    if last or exc.code not in (SEQUENCE_CODE, UUID_REUSED_CODE):
                        raise
                    self.state.sequence += SEQUENCE_SKIP

        await self._waiting(attempt)

    async def _card_failed(self, exc: FeishuApiError, *, opening: bool = False) -> BaseException:
        """``exc`` itself, or a :class:`_CardDead` once the card is marked dead: the card cannot
        change (CANNOT_UPDATE_CODES), or a call that retrying cannot fix failed while opening the
        card or delivering the final."""
        if exc.code in CANNOT_UPDATE_CODES or ((opening or self._final) and not is_transient(exc)):
            self.state.dead = True
            await self._save()
            dead = _CardDead(str(exc))
            dead.__cause__ = exc
            return dead
        return exc

    # -- plumbing ----------------------------------------------------------------------------

    async def _post(self, msg_type: str, content: dict[str, Any], uuid: str) -> str:
        """Sends a message (``interactive``: the card; ``post``: a part of the final): a reply to
        ``reply_to``, else (or once it was recalled) to the chat, with the same uuid either way
        (FEISHU.md §10)."""
        target = self.target
        if target.reply_to and not self._recalled:
            try:
                return await self.api.reply_message(target.reply_to, msg_type, content, uuid=uuid)
            except FeishuApiError as exc:
                if exc.code not in RECALLED_CODES:
                    raise
                self._recalled = True
        return await self.api.send_message(target.chat_id, msg_type, content, uuid=uuid)

    async def _waiting(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """``call()``; during the final, rate limits are waited out (at most ``max_wait`` in all)."""
        while True:
            try:
                return await call()
            except FeishuApiError as exc:
                delay = retry_after_seconds(exc)
                if not self._final or not is_rate_limited(exc) or self._waited + delay > self._max_wait:
                    raise
                self._waited += delay
                await self._sleep(delay)

    def _uuid(self, suffix: str) -> str:
        return idempotency_uuid(f"{self.target.turn_id}:{suffix}")

    async def _save(self) -> None:
        if self.store is not None:
            await self.store.save(self.target.turn_id, dataclasses.replace(self.state))


def _final_parts(text: str) -> list[str]:
    parts = [part for part in split_markdown(safe_text(text), CARD_TEXT_BUDGET, text_size) if part.strip()]
    return parts or [safe_text("")]
