"""An in-memory Feishu Open API with the semantics the sink relies on (FEISHU.md §7, §9, §10).

- Messages: ``send_message`` / ``reply_message`` append to a chat; a ``uuid`` seen within the
  last hour returns the first message's id and creates nothing (send and reply share one uuid
  space, an assumption: FEISHU.md §7 leaves it open). Replying to a recalled message: 230011.
- Content limits: an interactive card or a post ≤ 30 KB of JSON (230025), text ≤ 150 KB (230025).
- CardKit: ``create_card`` validates a card JSON 2.0 (300303 otherwise; 200860 over 30 KB) and
  returns a ``card_id``; a card is sent once (as ``{"type":"card","data":{"card_id":…}}``);
  every card call needs a ``sequence`` above the last one applied on that card (300317); a
  CardKit uuid replays its call (no effect) or, reused for another operation, fails (200770);
  streaming closes 10 minutes after it was last enabled: content calls then fail with 200850
  (300309 after an explicit close).
- Error injection per operation (:meth:`FakeFeishuApi.fail`): an API error (code, HTTP status,
  retry_after) or a transport error, optionally *applied* first ("the answer was lost").
- What the user sees: :meth:`FakeFeishuApi.visible` lists a chat's messages in order with their
  current text (a CardKit card: its markdown element's current content).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from delivery.platforms.feishu.api import FeishuApiError, FeishuTransportError

CARD_MAX_BYTES = 30 * 1024
TEXT_MAX_BYTES = 150 * 1024
UUID_TTL = 3600.0
STREAMING_TTL = 600.0
_ELEMENT_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,19}$")


class FakeClock:
    """A clock the tests move; ``sleep`` advances it (and records the delays)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass
class Failure:
    op: str
    code: int | None  # None: a transport error
    http_status: int | None = None
    retry_after: float | None = None
    times: int | None = 1  # None: every time
    applied: bool = False  # apply the call, then raise a transport error
    when: Any = None  # a predicate on the call's kwargs


@dataclass
class Card:
    card_id: str
    elements: dict[str, dict[str, Any]]
    streaming: bool
    enabled_at: float
    closed_explicitly: bool = False
    last_sequence: int = 0
    message_id: str | None = None


@dataclass
class Message:
    message_id: str
    chat_id: str
    sender: str  # "user" | "bot"
    msg_type: str
    content: dict[str, Any]
    reply_to: str | None = None
    uuid: str | None = None
    card_id: str | None = None
    recalled: bool = False


@dataclass
class Visible:
    message_id: str
    sender: str
    text: str
    reply_to: str | None
    card_id: str | None


@dataclass
class FakeFeishuApi:
    clock: FakeClock = field(default_factory=FakeClock)
    messages: dict[str, Message] = field(default_factory=dict)
    chats: dict[str, list[str]] = field(default_factory=dict)
    cards: dict[str, Card] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    _uuids: dict[str, tuple[str, float]] = field(default_factory=dict)
    _card_uuids: dict[str, tuple[str, Any]] = field(default_factory=dict)
    _ids: Any = field(default_factory=itertools.count)

    # -- test controls -----------------------------------------------------------------------

    def user_message(self, chat_id: str, text: str = "hi") -> str:
        """A message from the user in ``chat_id``; returns its id."""
        return self._append(chat_id, "user", "text", {"text": text}, None, None)

    def recall(self, message_id: str) -> None:
        self.messages[message_id].recalled = True

    def fail(self, op: str, code: int | None = None, **options: Any) -> Failure:
        """Makes the next ``times`` calls of ``op`` fail (``code=None``: transport error)."""
        failure = Failure(op, code, **options)
        self.failures.append(failure)
        return failure

    def visible(self, chat_id: str) -> list[Visible]:
        """The chat as the user sees it, in order (recalled messages left out)."""
        out = []
        for message_id in self.chats.get(chat_id, []):
            message = self.messages[message_id]
            if not message.recalled:
                out.append(
                    Visible(
                        message_id, message.sender, self._text(message), message.reply_to, message.card_id
                    )
                )
        return out

    def bot_messages(self, chat_id: str) -> list[Visible]:
        return [m for m in self.visible(chat_id) if m.sender == "bot"]

    def ops(self, *names: str) -> list[tuple[str, dict[str, Any]]]:
        return [(op, kw) for op, kw in self.calls if not names or op in names]

    # -- FeishuApi ---------------------------------------------------------------------------

    async def bot_info(self) -> dict[str, Any]:
        return {"open_id": "ou_bot", "app_name": "PicoBot"}

    async def send_message(self, chat_id: str, msg_type: str, content: dict[str, Any], *, uuid: str) -> str:
        kwargs = {"chat_id": chat_id, "msg_type": msg_type, "content": content, "uuid": uuid}
        return await self._call(
            "send_message", kwargs, lambda: self._post(chat_id, None, msg_type, content, uuid)
        )

    async def reply_message(
        self, message_id: str, msg_type: str, content: dict[str, Any], *, uuid: str
    ) -> str:
        kwargs = {"message_id": message_id, "msg_type": msg_type, "content": content, "uuid": uuid}

        def apply() -> str:
            parent = self.messages.get(message_id)
            if parent is None or parent.recalled:
                raise FeishuApiError(230011, "the message was recalled", http_status=400)
            return self._post(parent.chat_id, message_id, msg_type, content, uuid)

        return await self._call("reply_message", kwargs, apply)

    async def create_card(self, card: dict[str, Any]) -> str:
        def apply() -> str:
            if card.get("schema") != "2.0":
                raise FeishuApiError(300303, "card JSON 2.0 only", http_status=400)
            if _size(card) > CARD_MAX_BYTES:
                raise FeishuApiError(200860, "card too large", http_status=400)
            config = card.get("config", {})
            if config.get("update_multi") is not True:
                raise FeishuApiError(300302, "update_multi must be true", http_status=400)
            elements = {}
            for element in card["body"]["elements"]:
                element_id = element.get("element_id")
                if element_id is not None:
                    if not _ELEMENT_ID.match(element_id) or element_id in elements:
                        raise FeishuApiError(300301, "bad element_id", http_status=400)
                    _check_content(element["content"])
                    elements[element_id] = dict(element)
            card_id = f"card_{next(self._ids)}"
            streaming = bool(config.get("streaming_mode"))
            self.cards[card_id] = Card(card_id, elements, streaming, self.clock())
            return card_id

        return await self._call("create_card", {"card": card}, apply)

    async def stream_text(
        self, card_id: str, element_id: str, text: str, *, sequence: int, uuid: str
    ) -> None:
        kwargs = {
            "card_id": card_id,
            "element_id": element_id,
            "text": text,
            "sequence": sequence,
            "uuid": uuid,
        }

        def apply() -> None:
            card = self._card_op(card_id, uuid, ("content", element_id, text), sequence)
            if card is None:
                return
            if not self._streaming(card):
                code = 300309 if card.closed_explicitly else 200850
                raise FeishuApiError(code, "card streaming closed", http_status=400)
            element = card.elements.get(element_id)
            if element is None or element.get("tag") not in ("markdown", "plain_text"):
                raise FeishuApiError(300310, "not a text element", http_status=400)
            _check_content(text)
            element["content"] = text
            card.last_sequence = sequence

        await self._call("stream_text", kwargs, apply)

    async def set_streaming(self, card_id: str, enabled: bool, *, sequence: int, uuid: str) -> None:
        kwargs = {"card_id": card_id, "enabled": enabled, "sequence": sequence, "uuid": uuid}

        def apply() -> None:
            card = self._card_op(card_id, uuid, ("settings", enabled), sequence)
            if card is None:
                return
            card.streaming = enabled
            card.closed_explicitly = not enabled
            if enabled:
                card.enabled_at = self.clock()
            card.last_sequence = sequence

        await self._call("set_streaming", kwargs, apply)

    async def get_resource(self, message_id: str, file_key: str, kind: str) -> tuple[bytes, str]:
        raise FeishuApiError(234043, "no resources in the fake", http_status=400)

    # -- internals ---------------------------------------------------------------------------

    def is_streaming(self, card_id: str) -> bool:
        return self._streaming(self.cards[card_id])

    def _streaming(self, card: Card) -> bool:
        return card.streaming and self.clock() - card.enabled_at < STREAMING_TTL

    async def _call(self, op: str, kwargs: dict[str, Any], apply: Any) -> Any:
        self.calls.append((op, kwargs))
        for failure in self.failures:
            if failure.op != op or failure.times == 0 or (failure.when and not failure.when(kwargs)):
                continue
            if failure.times is not None:
                failure.times -= 1
            if failure.applied:
                apply()
                raise FeishuTransportError(f"{op}: connection reset after the request was sent")
            if failure.code is None:
                raise FeishuTransportError(f"{op}: connect timeout")
            raise FeishuApiError(
                failure.code,
                "injected",
                http_status=failure.http_status or 400,
                retry_after=failure.retry_after,
            )
        return apply()

    def _card_op(self, card_id: str, uuid: str, operation: Any, sequence: int) -> Card | None:
        """The card for a call, or None when the call replays one already applied (its uuid)."""
        card = self.cards.get(card_id)
        if card is None:
            raise FeishuApiError(200740, "card not found", http_status=400)
        seen = self._card_uuids.get(uuid)
        if seen is not None:
            if seen != (card_id, operation):
                raise FeishuApiError(200770, "uuid reused for another operation", http_status=400)
            return None
        if not 1 <= sequence <= 2_147_483_647 or sequence <= card.last_sequence:
            raise FeishuApiError(300317, "sequence must increase", http_status=400)
        self._card_uuids[uuid] = (card_id, operation)
        return card

    def _post(
        self, chat_id: str, reply_to: str | None, msg_type: str, content: dict[str, Any], uuid: str
    ) -> str:
        if not uuid or len(uuid) > 50:
            raise FeishuApiError(230001, "bad uuid", http_status=400)
        seen = self._uuids.get(uuid)
        if seen is not None and self.clock() - seen[1] < UUID_TTL:
            return seen[0]
        card_id = None
        if msg_type == "interactive":
            if content.get("type") == "card":
                card_id = content["data"]["card_id"]
                card = self.cards.get(card_id)
                if card is None:
                    raise FeishuApiError(200740, "card not found", http_status=400)
                if card.message_id is not None:
                    raise FeishuApiError(230099, "card entity already sent", http_status=400)
            elif content.get("schema") != "2.0" or not content["body"]["elements"]:
                raise FeishuApiError(230099, "card content could not be built", http_status=400)
            if _size(content) > CARD_MAX_BYTES:
                raise FeishuApiError(230025, "card over 30 KB", http_status=400)
        elif msg_type == "post":
            paragraphs = content.get("zh_cn", {}).get("content")
            if not paragraphs or not all(isinstance(p, list) and p for p in paragraphs):
                raise FeishuApiError(230001, "post content is invalid", http_status=400)
            for paragraph in paragraphs:
                for element in paragraph:
                    _check_content(element.get("text", ""))
            if _size(content) > CARD_MAX_BYTES:
                raise FeishuApiError(230025, "post over 30 KB", http_status=400)
        elif msg_type == "text":
            _check_content(content["text"])
            if _size(content) > TEXT_MAX_BYTES:
                raise FeishuApiError(230025, "text over 150 KB", http_status=400)
        message_id = self._append(chat_id, "bot", msg_type, content, reply_to, uuid, card_id)
        if card_id is not None:
            self.cards[card_id].message_id = message_id
        self._uuids[uuid] = (message_id, self.clock())
        return message_id

    def _append(self, chat_id, sender, msg_type, content, reply_to, uuid, card_id=None) -> str:
        message_id = f"om_{next(self._ids)}"
        self.messages[message_id] = Message(
            message_id, chat_id, sender, msg_type, content, reply_to, uuid, card_id
        )
        self.chats.setdefault(chat_id, []).append(message_id)
        return message_id

    def _text(self, message: Message) -> str:
        if message.card_id is not None:
            return "\n".join(e["content"] for e in self.cards[message.card_id].elements.values())
        if message.msg_type == "interactive":
            return "\n".join(e["content"] for e in message.content["body"]["elements"])
        if message.msg_type == "post":
            paragraphs = message.content["zh_cn"]["content"]
            return "\n".join("".join(e.get("text", "") for e in paragraph) for paragraph in paragraphs)
        return message.content.get("text", "")


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def _check_content(text: str) -> None:
    """CardKit text: 1..100000 characters, encodable (no lone surrogate)."""
    if not isinstance(text, str) or not 1 <= len(text) <= 100_000:
        raise FeishuApiError(230001, "content must be 1..100000 characters", http_status=400)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FeishuApiError(230001, "content is not valid UTF-8", http_status=400) from exc
