"""Parsing a verified Feishu event into the message PicoBot answers (FEISHU.md §6).

:func:`parse_event` takes one decoded event body (schema 2.0, as the webhook and the long
connection deliver it) and returns a :class:`FeishuMessageEvent` for an ``im.message.receive_v1``
that PicoBot answers, or an :class:`IgnoredEvent` saying why not: another event type, a sender that
is not a user, a group message that does not mention the bot, no text or image, or a malformed event (ids that are not the platform's included). It never raises. Text is
scrubbed for storage (lone surrogates repaired, NUL replaced: PostgreSQL cannot hold it).

Text comes from ``text`` messages (``@_user_N`` placeholders resolved: the bot's mention removed,
others shown as ``@Name``), ``post`` messages (title, paragraphs, links as ``text (url)``, code
blocks as fences, images collected; a locale-wrapped post is accepted) and ``image`` messages
(no text). Another message type (a file, audio, a sticker…) is returned with ``unsupported`` set,
so the user can be told. Unknown fields and tags are tolerated.

Pure: no Django, Channels or HTTP client imports.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from providers.unicode_text import scrub_text

__all__ = [
    "MESSAGE_EVENT",
    "NOT_MENTIONED",
    "FeishuMessageEvent",
    "IgnoredEvent",
    "is_command",
    "parse_event",
]

MESSAGE_EVENT = "im.message.receive_v1"
NOT_MENTIONED = "a group message that does not mention the bot"
#: The platform's ids are short (``om_`` + 32); a longer one is not the platform's (the row holds 64).
MAX_ID_CHARS = 64
_ID = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
_PLACEHOLDER = re.compile(r"@_user_\d+")
_SPACES = re.compile(r"[ \t]{2,}")


@dataclass(frozen=True)
class FeishuMessageEvent:
    """One user message to answer; JSON-ready (``dataclasses.asdict``; ``image_keys`` a tuple).

    Attributes:
        event_id: ``header.event_id`` (logs; de-duplication is on ``message_id``, FEISHU.md §3).
        app_id: ``header.app_id`` ("" when absent).
        message_id: ``om_…``: the de-duplication key and what the answer replies to.
        chat_id: ``oc_…``: the PicoBot chat id.
        chat_type: ``"p2p"`` or ``"group"``.
        sender_open_id: ``ou_…`` of the sender.
        text: The message's text, mentions of the bot removed, stripped ("" for images alone).
        image_keys: The ``image_key`` of every image in the message, in order.
        create_time_ms: When the platform says it was sent (ms since the epoch; 0 when absent or
            implausible: the age check is then skipped).
        thread_id: The topic thread, if any.
        unsupported: The message type when PicoBot cannot read it (a file, a sticker…): the
            user is told so; "" otherwise.
    """

    event_id: str
    app_id: str
    message_id: str
    chat_id: str
    chat_type: str
    sender_open_id: str
    text: str
    image_keys: tuple[str, ...] = ()
    create_time_ms: int = 0
    thread_id: str = ""
    unsupported: str = ""


@dataclass(frozen=True)
class IgnoredEvent:
    """An event PicoBot acknowledges and does not answer. ``reason`` is for the log."""

    event_type: str
    reason: str


def is_command(text: str) -> bool:
    """Whether ``text`` is a slash command (``/help``, ``/stop`` …; seed 004 §7)."""
    return text.lstrip().startswith("/")


def is_group_event(body: Any) -> bool:
    """Whether ``body`` is a message event from a group chat (it then needs the bot's open_id)."""
    if not isinstance(body, dict):
        return False
    return _str(_dict(_dict(body.get("event")).get("message")).get("chat_type")) == "group"


def parse_event(body: Any, *, bot_open_id: str | None) -> FeishuMessageEvent | IgnoredEvent:
    """The message of one event body, or why it is ignored (see the module docstring).

    Args:
        body: The decoded event: ``{"schema": "2.0", "header": {...}, "event": {...}}``.
        bot_open_id: The bot's own open_id (group messages must mention it); None while unknown,
            which ignores every group message.
    """
    try:
        return _parse(body, bot_open_id)
    except (TypeError, ValueError, AttributeError, RecursionError) as exc:  # a shape nobody documents
        return IgnoredEvent("", f"malformed event ({type(exc).__name__})")


def _parse(body: Any, bot_open_id: str | None) -> FeishuMessageEvent | IgnoredEvent:
    if not isinstance(body, dict):
        return IgnoredEvent("", "not a JSON object")
    header = _dict(body.get("header"))
    event_type = _str(header.get("event_type")) or _str(_dict(body.get("event")).get("type"))
    if event_type != MESSAGE_EVENT:
        return IgnoredEvent(event_type, "event type not handled")
    event = _dict(body.get("event"))
    message = _dict(event.get("message"))
    sender = _dict(event.get("sender"))
    message_id, chat_id = _str(message.get("message_id")), _str(message.get("chat_id"))
    if not message_id or not chat_id:
        return IgnoredEvent(event_type, "no message_id or chat_id")
    if not (_ID.match(message_id) and _ID.match(chat_id)):
        return IgnoredEvent(event_type, "a message_id or chat_id that is not the platform's")
    if _str(sender.get("sender_type")) not in ("", "user"):
        return IgnoredEvent(event_type, f"sender type {_str(sender.get('sender_type'))!r}")
    chat_type = _str(message.get("chat_type"))
    mentions = [m for m in _list(message.get("mentions")) if isinstance(m, dict)]
    bot_keys = {_str(m.get("key")) for m in mentions if bot_open_id and _mention_open_id(m) == bot_open_id}
    if chat_type == "group" and not bot_keys:
        return IgnoredEvent(event_type, NOT_MENTIONED)
    names = {_str(m.get("key")): _str(m.get("name")) for m in mentions}
    try:
        content = json.loads(_str(message.get("content")) or "{}")
    except ValueError:
        return IgnoredEvent(event_type, "content is not JSON")
    message_type = _str(message.get("message_type"))
    if message_type == "text":
        text, images = _str(_dict(content).get("text")), []
    elif message_type == "post":
        text, images = _post_text(content)
    elif message_type == "image":
        key = _str(_dict(content).get("image_key"))
        text, images = "", [key] if key else []
    else:
        text, images = "", []
    text = scrub_text(_resolve_mentions(text, names, bot_keys))
    images = [key for key in images if _ID.match(key)]
    unsupported = "" if message_type in ("text", "post", "image") else message_type[:32] or "unknown"
    if not text and not images and not unsupported:
        return IgnoredEvent(event_type, "nothing to answer (no text, no image)")
    return FeishuMessageEvent(
        event_id=_str(header.get("event_id"))[:MAX_ID_CHARS],
        app_id=_str(header.get("app_id"))[:MAX_ID_CHARS],
        message_id=message_id,
        chat_id=chat_id,
        chat_type=chat_type,
        sender_open_id=_str(_dict(sender.get("sender_id")).get("open_id"))[:MAX_ID_CHARS],
        text=text,
        image_keys=tuple(images),
        create_time_ms=_ms(message.get("create_time")) or _ms(header.get("create_time")),
        thread_id=_str(message.get("thread_id"))[:MAX_ID_CHARS],
        unsupported=unsupported,
    )


def _resolve_mentions(text: str, names: dict[str, str], bot_keys: set[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        key = match.group(0)
        if key in bot_keys:
            return ""
        name = names.get(key)
        return f"@{name}" if name else key

    resolved = _PLACEHOLDER.sub(replace, text)
    lines = [_SPACES.sub(" ", line).strip() for line in resolved.split("\n")]
    return "\n".join(lines).strip()


def _post_text(content: Any) -> tuple[str, list[str]]:
    """The text and image keys of a ``post`` content (FEISHU.md §6), locale-wrapped or not."""
    post = _dict(content)
    if "content" not in post:  # {"zh_cn": {...}}: the first locale that has paragraphs
        post = next((_dict(v) for v in post.values() if isinstance(v, dict) and "content" in v), {})
    lines: list[str] = []
    images: list[str] = []
    title = _str(post.get("title")).strip()
    if title:
        lines.append(title)
    for paragraph in _list(post.get("content")):
        if not isinstance(paragraph, list):
            continue
        pieces: list[str] = []
        for element in paragraph:
            element = _dict(element)
            tag = _str(element.get("tag"))
            if tag in ("text", "md"):
                pieces.append(_str(element.get("text")))
            elif tag == "a":
                label, href = _str(element.get("text")), _str(element.get("href"))
                pieces.append(f"{label} ({href})" if label and href and label != href else label or href)
            elif tag == "at":
                pieces.append(_str(element.get("user_id")) or f"@{_str(element.get('user_name'))}")
            elif tag == "img":
                key = _str(element.get("image_key"))
                if key:
                    images.append(key)
            elif tag == "code_block":
                code = _str(element.get("text")).rstrip("\n")
                pieces.append(f"\n```{_str(element.get('language')).lower()}\n{code}\n```\n")
            elif tag == "emotion":
                pieces.append(f":{_str(element.get('emoji_type'))}:")
        line = "".join(pieces)
        if line.strip():
            lines.append(line.strip("\n"))
    return "\n".join(lines), images


def _mention_open_id(mention: dict) -> str:
    ident = mention.get("id")
    return _str(_dict(ident).get("open_id")) if isinstance(ident, dict) else _str(ident)


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _ms(value: Any) -> int:
    """A millisecond timestamp, or 0 when it is missing or not a plausible one (negative, or past
    the year 9999: it would not fit the database's integer)."""
    try:
        ms = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return ms if 0 < ms < 253_402_300_800_000 else 0
