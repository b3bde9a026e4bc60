"""The limits and address rules of one ``http_fetch`` (:class:`FetchPolicy`) and its refusal error.

Defaults: 1 MiB of body, 15 s for the whole fetch, 5 redirects, public addresses only
(``tools/README.md``). Only :meth:`FetchPolicy.from_settings` reads Django's settings.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from conversations.agent.tool_registry import ToolError
from conversations.tools.http_fetch.addresses import IPAddress

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``resolver(host, port) -> addresses`` (IP strings); the default asks the system (getaddrinfo)."""

DEFAULT_MAX_BYTES = 1024 * 1024
DEFAULT_TIMEOUT = 15.0
MAX_REDIRECTS = 5


class FetchRefused(ToolError):
    """The URL or one of its addresses is not allowed; the message says why (never a secret)."""


@dataclass(frozen=True)
class FetchPolicy:
    """Limits of ``http_fetch``.

    Attributes:
        max_bytes: body bytes kept, at most (a call may ask for fewer).
        timeout: seconds for the whole fetch, redirects included.
        allow_private: ``PICOBOT_HTTP_FETCH_ALLOW_PRIVATE``: loopback/private/link-local allowed.
        max_redirects: redirects followed before giving up.
        resolver: name → addresses; None = the system resolver. Tests inject one.
        allow_address: an extra exemption ``allow_address(ip) -> bool`` checked before the
            refusals (tests: "this one loopback test server counts as public"); None = none.
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    timeout: float = DEFAULT_TIMEOUT
    allow_private: bool = False
    max_redirects: int = MAX_REDIRECTS
    resolver: Resolver | None = None
    allow_address: Callable[[IPAddress], bool] | None = None

    @classmethod
    def from_settings(cls) -> FetchPolicy:
        """The policy of ``settings.PICOBOT`` (``HTTP_FETCH_MAX_BYTES``, ``_TIMEOUT``, ``_ALLOW_PRIVATE``)."""
        from django.conf import settings

        config = settings.PICOBOT
        return cls(
            max_bytes=config.http_fetch_max_bytes,
            timeout=config.http_fetch_timeout,
            allow_private=config.http_fetch_allow_private,
        )
