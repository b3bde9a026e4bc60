"""The building blocks of :mod:`picobot_site.config`: how a field is declared, the checks that
need more than a type and a bound, and the one-line error (pure; no Django).

A variable is ``PICOBOT_`` + the field name in capitals, matched case-sensitively. Every error
names the variable and shows its value escaped and cut to :data:`SHOWN_VALUE_CHARS`.
"""

from __future__ import annotations

import functools
import logging
import re
import zoneinfo
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError
from pydantic_settings import NoDecode

ENV_PREFIX = "PICOBOT_"
MAX_SECONDS = 10 * 365 * 86400
"""Upper bound of every duration in seconds (ten years): larger ones overflow the database's
millisecond columns and Redis expiries."""
SHOWN_VALUE_CHARS = 60
REDIS_SCHEMES = ("redis", "rediss", "unix")

CommaList = Annotated[list[str], NoDecode]
"""A comma-separated variable (``a,b``); blank items are dropped."""


class ConfigError(ValueError):
    """A ``PICOBOT_*`` variable has a bad value; the message is one line naming each variable."""


def env_name(field: str) -> str:
    """``inbox_capacity`` → ``PICOBOT_INBOX_CAPACITY``."""
    return ENV_PREFIX + field.upper()


def setting(default: Any, meaning: str, *, unit: str = "", shown: str | None = None, **bounds: Any) -> Any:
    """A field with its README row: ``meaning`` and the default as shown (``shown``, else the value
    with ``unit``); ``bounds`` are pydantic's (``ge``, ``gt``, ``le``, ``max_length``). A duration
    in seconds (``unit="s"``) is at most :data:`MAX_SECONDS`."""
    if unit == "s":
        bounds.setdefault("le", MAX_SECONDS)
    return Field(default, description=meaning, json_schema_extra={"unit": unit, "shown": shown}, **bounds)


def comma_list(value: Any) -> Any:
    """``"a, ,b"`` → ``["a", "b"]``; other values unchanged."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def known_zone(value: str) -> str:
    """An IANA time zone name (``Europe/Berlin``; not a region such as ``Europe``), else ValueError."""
    if value not in _zones():
        raise ValueError("unknown time zone (an IANA name such as Europe/Berlin)")
    return value


@functools.cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - {"localtime", "posixrules", "Factory"}


def log_level(value: Any) -> Any:
    """A level name Python's logging knows (any case: ``debug``, ``WARN``, ``NOTSET``) or a number."""
    if not isinstance(value, str):
        return value
    name = value.strip().upper()
    if name.isdigit() or name in logging.getLevelNamesMapping():
        return int(name) if name.isdigit() else name
    raise ValueError("should be DEBUG, INFO, WARNING, ERROR or CRITICAL (or a number)")


def redis_url(value: str) -> str:
    """Blank, or a URL redis-py opens (``redis://``, ``rediss://``, ``unix://``)."""
    if value and urlsplit(value).scheme not in REDIS_SCHEMES:
        raise ValueError("should be a redis://host:port/db URL (or rediss://, unix://)")
    return value


def origins(values: list[str]) -> list[str]:
    """Origins with their scheme and host (``https://chat.example.com``), as Django requires."""
    for origin in values:
        if "://" not in origin or not urlsplit(origin).netloc:
            raise ValueError(f"{shown_value(origin)} needs its scheme and host (https://chat.example.com)")
    return values


def hosts(values: list[str]) -> list[str]:
    """Host names as Django matches them: no scheme, path or port (``chat.example.com``,
    ``.example.com``, ``10.0.0.2``, ``[::1]``, ``*``)."""
    if not values:
        raise ValueError("names no host: every request would be refused")
    for host in values:
        if not _HOST.fullmatch(host):
            raise ValueError(f"{shown_value(host)} is not a host name (no scheme, path, port or spaces)")
    return values


_HOST = re.compile(r"\*|\.?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\]")


def http_url(value: str) -> str:
    """Blank, or an ``http(s)://host…`` URL."""
    if value:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises for a port out of range
        except ValueError as exc:
            raise ValueError(f"should be an http:// or https:// URL with a host ({exc})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.port == 0 or " " in value:
            raise ValueError("should be an http:// or https:// URL with a host")
    return value


def header_value(value: str) -> str:
    """A secret sent in an HTTP header: printable ASCII without spaces."""
    if value and not (value.isascii() and value.isprintable() and " " not in value):
        raise ValueError("should be printable ASCII without spaces (it is sent in an HTTP header)")
    return value


def describe_errors(
    exc: ValidationError, environ: Mapping[str, str], secret: frozenset[str] = frozenset()
) -> str:
    """``PICOBOT_X=raw: what is wrong; PICOBOT_Y=…`` — one line for all of ``exc``'s errors; the
    value of a variable named in ``secret`` (keys, URLs with passwords) is never shown."""
    parts: list[str] = []
    for error in exc.errors(include_url=False):
        message = str(error["msg"]).removeprefix("Value error, ")
        if message[1:2].islower():  # pydantic's "Input should …", not a variable name
            message = message[:1].lower() + message[1:]
        if not error["loc"]:
            parts.append(message)
            continue
        where = str(error["loc"][0])
        name = where if where.startswith(ENV_PREFIX) else env_name(where)
        raw = "" if name in secret else environ.get(name, "").strip()
        parts.append(f"{name}={shown_value(raw)}: {message}" if raw else f"{name}: {message}")
    return "; ".join(dict.fromkeys(parts))


def one_line(text: str) -> str:
    """``text`` with its line breaks escaped, so an error stays one line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def shown_value(raw: str) -> str:
    """``raw`` as an error line may show it: printable and short, else escaped and cut."""
    if raw.isprintable() and len(raw) <= SHOWN_VALUE_CHARS:
        return raw
    cut = raw[:SHOWN_VALUE_CHARS]
    return repr(cut) + ("…" if len(raw) > SHOWN_VALUE_CHARS else "")
