"""What the Feishu sink needs of the Open API, and the errors it reacts to (FEISHU.md §1, §10).

The :class:`FeishuApi` protocol is implemented over HTTP by ``conversations.feishu.client``
(token handling, retry on invalid tokens) and by in-memory fakes in the tests. Every call raises
on failure::

    FeishuError
    ├── FeishuApiError        the platform answered with a non-zero body ``code`` (any HTTP status)
    └── FeishuTransportError  no answer (connect error, timeout, reset, unreadable body): the call
                              may or may not have been applied — retry only idempotent calls

Decisions are taken on ``code``, never on ``msg`` (FEISHU.md §1). The code sets below are the
actions of FEISHU.md §10.

Pure: no Django, Channels or HTTP client imports.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

__all__ = [
    "CANNOT_UPDATE_CODES",
    "CARD_GONE_CODES",
    "FeishuApi",
    "FeishuApiError",
    "FeishuError",
    "FeishuTransportError",
    "INTERACTION_BUSY_CODE",
    "PERMANENT_SEND_CODES",
    "RATE_LIMIT_CODES",
    "RECALLED_CODES",
    "SEQUENCE_CODE",
    "STREAMING_CLOSED_CODES",
    "TOKEN_INVALID_CODES",
    "TOO_LARGE_CODES",
    "UUID_REUSED_CODE",
    "idempotency_uuid",
    "is_rate_limited",
    "is_transient",
    "retry_after_seconds",
]

#: Missing / invalid / bad tenant token: drop the cached token, fetch a new one, retry once.
TOKEN_INVALID_CODES = frozenset({99991661, 99991663, 99991665})
#: The app or a chat/message is over its frequency limit: wait (``retry_after``) and retry.
RATE_LIMIT_CODES = frozenset({99991400, 230020})
#: A CardKit ``sequence`` that is not above the last one used on that card.
SEQUENCE_CODE = 300317
#: The card's streaming mode timed out or was closed: re-enable it, or finish elsewhere.
STREAMING_CLOSED_CODES = frozenset({200850, 300309})
#: The card entity is missing, expired (14 days), not this app's, or the message is too old.
CARD_GONE_CODES = frozenset({200740, 200750, 300311, 230031})
#: A CardKit uuid reused for another operation (§10): a new uuid per distinct operation.
UUID_REUSED_CODE = 200770
#: CardKit's server error: retry with backoff, keeping ``sequence`` increasing.
SERVER_ERROR_CODE = 300120
DEFAULT_RETRY_AFTER = 1.0
BUSY_RETRY_AFTER = 0.5
#: Every code after which the card will not change any more: the final goes as a new message.
CANNOT_UPDATE_CODES = STREAMING_CLOSED_CODES | CARD_GONE_CODES
#: The message replied to was recalled or deleted: send to the chat instead (same uuid).
RECALLED_CODES = frozenset({230011, 230110})
#: A user interaction callback holds the card: retry after a short delay.
INTERACTION_BUSY_CODE = 200810
#: The body is over the platform's limit: split.
TOO_LARGE_CODES = frozenset({230025, 200860, 300305})
#: Sending to this chat cannot succeed (bot not in the group, user outside the availability,
#: no permission, the user blocked the bot, missing scope, invalid content).
PERMANENT_SEND_CODES = frozenset({230001, 230002, 230013, 230035, 230053, 99991672})


#: A message ``uuid`` is at most 50 characters (FEISHU.md §7; CardKit allows 64).
MAX_UUID_CHARS = 50


def idempotency_uuid(key: str) -> str:
    """The ``uuid`` of a send or card call for an idempotency key: the key itself when it fits in
    :data:`MAX_UUID_CHARS`, else ``"h"`` + a SHA-256 prefix (the same key, the same uuid)."""
    if len(key) <= MAX_UUID_CHARS:
        return key
    return "h" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[: MAX_UUID_CHARS - 1]


class FeishuError(Exception):
    """Base of the Feishu adapter's errors."""


class FeishuApiError(FeishuError):
    """The Open API answered with a non-zero ``code`` (FEISHU.md §1).

    Attributes:
        code: The body's ``code``.
        msg: The body's ``msg`` (for logs only; it changes between releases).
        http_status: The HTTP status, or None.
        log_id: ``error.log_id`` or the ``x-tt-logid`` header, for the operator.
        retry_after: Seconds to wait before retrying (``x-ogw-ratelimit-reset``), or None.
    """

    def __init__(
        self,
        code: int,
        msg: str = "",
        *,
        http_status: int | None = None,
        log_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        text = f"Feishu API error {code}: {msg}" if msg else f"Feishu API error {code}"
        super().__init__(f"{text} (log id {log_id})" if log_id else text)
        self.code = code
        self.msg = msg
        self.http_status = http_status
        self.log_id = log_id
        self.retry_after = retry_after

    @property
    def rate_limited(self) -> bool:
        return self.code in RATE_LIMIT_CODES or self.http_status == 429


class FeishuTransportError(FeishuError):
    """No usable answer (connect error, timeout, reset, a body that is not JSON).

    The request may have been applied: only calls made idempotent by a ``uuid`` or by their
    nature (setting a card's content) may be repeated.
    """


class FeishuApi(Protocol):
    """The Open API calls the Feishu channel makes (FEISHU.md §6–§9). All raise :class:`FeishuError`.

    ``content`` and ``card`` arguments are Python objects; the implementation serialises them as
    the API wants (``content`` is a JSON string inside the JSON body). ``uuid`` makes a message
    send idempotent for an hour (≤ 50 characters) and a CardKit call idempotent (≤ 64).
    """

    async def bot_info(self) -> dict[str, Any]:
        """``GET /open-apis/bot/v3/info``: the top-level ``bot`` object (``open_id``, ``app_name``)."""
        ...

    async def send_message(self, chat_id: str, msg_type: str, content: dict[str, Any], *, uuid: str) -> str:
        """``POST /open-apis/im/v1/messages?receive_id_type=chat_id``; returns the new ``message_id``."""
        ...

    async def reply_message(
        self, message_id: str, msg_type: str, content: dict[str, Any], *, uuid: str
    ) -> str:
        """``POST /open-apis/im/v1/messages/{message_id}/reply``; returns the new ``message_id``."""
        ...

    async def create_card(self, card: dict[str, Any]) -> str:
        """``POST /open-apis/cardkit/v1/cards`` with a card JSON 2.0 object; returns ``card_id``."""
        ...

    async def stream_text(
        self, card_id: str, element_id: str, text: str, *, sequence: int, uuid: str
    ) -> None:
        """``PUT /open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}/content``: the full text."""
        ...

    async def set_streaming(self, card_id: str, enabled: bool, *, sequence: int, uuid: str) -> None:
        """``PATCH /open-apis/cardkit/v1/cards/{card_id}/settings``: ``streaming_mode`` on or off."""
        ...

    async def get_resource(self, message_id: str, file_key: str, kind: str) -> tuple[bytes, str]:
        """``GET /open-apis/im/v1/messages/{message_id}/resources/{file_key}?type=image|file``:
        ``(data, content_type)``."""
        ...


def is_rate_limited(exc: FeishuApiError) -> bool:
    """A frequency limit, or a card held by a user interaction: wait and try again."""
    return exc.rate_limited or exc.code == INTERACTION_BUSY_CODE


def retry_after_seconds(exc: FeishuApiError) -> float:
    """Seconds to wait before retrying: the platform's reset header, else a default."""
    if exc.retry_after is not None and exc.retry_after >= 0:
        return exc.retry_after
    return BUSY_RETRY_AFTER if exc.code == INTERACTION_BUSY_CODE else DEFAULT_RETRY_AFTER


def is_transient(exc: FeishuError) -> bool:
    """Whether retrying the same call later may succeed."""
    if isinstance(exc, FeishuTransportError):
        return True
    assert isinstance(exc, FeishuApiError)
    return is_rate_limited(exc) or exc.code == SERVER_ERROR_CODE or (exc.http_status or 0) >= 500
