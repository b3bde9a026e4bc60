"""Authentication of the REST control API (PROTOCOL §2, DESIGN §9).

Two ninja auth classes, tried in this order (both async: the lookups run on the storage threads
through ``run_storage``, never on the thread shared by sync views and the async ORM, DESIGN §2):

* :class:`BearerToken` — ``Authorization: Bearer <token>``, an API token of
  ``manage.py createtoken`` (looked up by hash with ``conversations.auth.user_for_token``, which
  also stamps ``last_used_at``). Token requests need no CSRF token.
* :class:`SessionCookie` — the WebUI's Django session. Writes (any method but GET, HEAD, OPTIONS,
  TRACE) must pass Django's CSRF check (``X-CSRFToken`` header = the ``csrftoken`` cookie, and
  for HTTPS a same-origin ``Referer``/``Origin``), else 403 ``csrf_failed``.

A request that carries an ``Authorization`` header is judged by it alone: a bad or revoked token
answers 401 even with a valid session cookie (as on the WebSocket, ``conversations.auth``).

Failed tokens are counted per client address (``conversations.auth.throttle``, issue 16): past
``PICOBOT_AUTH_FAILURES_PER_ADDRESS`` within the window, a token from that address answers 429
``too_many_requests`` with ``Retry-After`` before any database lookup.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja.security.base import AuthBase
from ninja.utils import check_csrf

from conversations.api.errors import ApiError
from conversations.auth import throttle, user_for_token
from conversations.storage.runner import run_storage

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class BearerToken(AuthBase):
    """``Authorization: Bearer <token>`` → the token's active user, or None (→ 401); raises
    ``ApiError`` 429 ``too_many_requests`` while the client's address has failed too often."""

    openapi_type = "http"
    openapi_scheme = "bearer"
    openapi_description = "An API token (`manage.py createtoken USER`), as `Authorization: Bearer <token>`."

    async def __call__(self, request: HttpRequest) -> Any:
        header = request.headers.get("Authorization")
        if header is None:
            return None
        scheme, _, raw = header.strip().partition(" ")
        raw = raw.strip()
        if scheme.lower() != "bearer" or not raw:
            return None
        address = throttle.request_address(request)
        retry_after = throttle.sign_in_retry_after(address)
        if retry_after is not None:
            raise ApiError(
                429,
                "too_many_requests",
                throttle.too_many_failures_message(retry_after),
                headers={"Retry-After": str(retry_after)},
            )
        user = await run_storage(user_for_token, raw)
        if user is None:
            throttle.sign_in_failed(address)
        return user


def _session_user(request: HttpRequest) -> Any:
    """The session's active user or None (evaluates ``request.user``: a session and user read)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not getattr(user, "is_active", True):
        return None
    return user


class SessionCookie(AuthBase):
    """The Django session (WebUI); CSRF-checked on writes. Never used when ``Authorization`` is sent."""

    csrf = True  # tells ninja's Swagger page to send X-CSRFToken from the csrftoken cookie
    openapi_type = "apiKey"
    openapi_in = "cookie"
    openapi_name = settings.SESSION_COOKIE_NAME
    openapi_description = (
        "The WebUI's Django session cookie; writes also need the `X-CSRFToken` header "
        "(the value of the `csrftoken` cookie)."
    )

    async def __call__(self, request: HttpRequest) -> Any:
        if request.headers.get("Authorization") is not None:
            return None  # judged by the token alone
        user = await run_storage(_session_user, request)
        if user is None:
            return None
        if request.method not in SAFE_METHODS and check_csrf(request) is not None:
            raise ApiError(
                403,
                "csrf_failed",
                "CSRF verification failed: a session-authenticated write needs the X-CSRFToken header "
                "(the csrftoken cookie's value); programs should use an API token instead",
            )
        return user


def api_auth() -> list[AuthBase]:
    """The auth callables of every authenticated operation, in the order they are tried."""
    return [BearerToken(), SessionCookie()]
