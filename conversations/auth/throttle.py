"""The process's rate limits (issue 16; Django glue over the pure ``ratelimit``).

Two limiters, kept in this process's memory (each server process counts on its own; a restart
forgets): failed sign-ins per client address (``PICOBOT_AUTH_FAILURES_PER_ADDRESS`` within
``PICOBOT_AUTH_FAILURE_WINDOW_SECONDS``) — API tokens on REST and the WebSocket handshake, and
logins on any account (``backends.AddressThrottleBackend``) — and messages per
user (``PICOBOT_USER_MESSAGES_PER_MINUTE``) for WebSocket ``message`` frames and REST sends. The
address is the one the server sees (``REMOTE_ADDR``, the ASGI ``client``): behind a proxy every
client shares the proxy's (README "Authentication"). Built on first use; ``reset_limits`` forgets
everything (tests, or after a settings change).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings

from conversations.auth.ratelimit import SlidingWindowLimiter

MESSAGE_WINDOW_SECONDS = 60.0
UNKNOWN_ADDRESS = "unknown"

_limiters: dict[str, SlidingWindowLimiter] = {}
_clock: Callable[[], float] = time.monotonic  # tests replace it


def _limiter(name: str) -> SlidingWindowLimiter:
    limiter = _limiters.get(name)
    if limiter is None:
        config = settings.PICOBOT
        if name == "sign_in":
            limiter = SlidingWindowLimiter(
                config.auth_failures_per_address, config.auth_failure_window_seconds
            )
        else:
            limiter = SlidingWindowLimiter(config.user_messages_per_minute, MESSAGE_WINDOW_SECONDS)
        _limiters[name] = limiter
    return limiter


def reset_limits() -> None:
    """Forget every count; the next use builds the limiters from the settings again."""
    _limiters.clear()


def scope_address(scope: dict[str, Any]) -> str:
    """The client address of an ASGI scope (``client`` = ``[host, port]``), or ``"unknown"``."""
    client = scope.get("client")
    return str(client[0]) if client else UNKNOWN_ADDRESS


def request_address(request: Any) -> str:
    """The client address of a Django request (``REMOTE_ADDR``), or ``"unknown"``."""
    return request.META.get("REMOTE_ADDR") or UNKNOWN_ADDRESS


def sign_in_retry_after(address: str) -> int | None:
    """Whole seconds before ``address`` may sign in (a token or a login) again, or None: it may now."""
    return _limiter("sign_in").retry_after(address, _clock())


def sign_in_failed(address: str) -> None:
    """Count a failed sign-in from ``address``: a token that matched no live token, a failed login."""
    _limiter("sign_in").record(address, _clock())


def take_message(user_pk: Any) -> int | None:
    """Count one message of the user: None when it may be sent, else whole seconds to wait
    (the message must then be refused, not stored)."""
    return _limiter("messages").take(str(user_pk), _clock())


def too_many_failures_message(retry_after: int) -> str:
    """The words of a refusal for too many failed tokens (REST message, WebSocket close reason)."""
    return f"too many failed sign-ins from this address; retry in {retry_after} s"


def too_many_messages_message(retry_after: int) -> str:
    """The words of a refused message (WebSocket ``error``, REST 429)."""
    limit = settings.PICOBOT.user_messages_per_minute
    return f"too many messages: at most {limit} a minute; send it again in {retry_after} s"
