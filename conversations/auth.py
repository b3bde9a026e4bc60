"""Authentication for WebSocket and REST (DESIGN §9, PROTOCOL §1 "Authentication").

API tokens are random strings shown once; only their SHA-256 hash and an 8-character prefix are
stored (``ApiToken``). A WebSocket authenticates by ``Authorization: Bearer <token>`` or
``?token=<token>`` (no Origin needed), or by the Django session cookie, which is accepted only from
an allowed Origin (cross-site WebSocket hijacking).
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import parse_qs, urlparse

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.http.request import split_domain_port, validate_host

from conversations.models import ApiToken, now_ms

TOKEN_PREFIX_CHARS = 8


def create_token(user: Any, name: str = "") -> str:
    """Create and return a new raw API token for ``user`` (touches the DB; shown once)."""
    raw = "pb_" + secrets.token_urlsafe(32)
    ApiToken.objects.create(
        user=user, name=name, prefix=raw[:TOKEN_PREFIX_CHARS], token_hash=ApiToken.hash_token(raw)
    )
    return raw


def user_for_token(raw: str) -> Any | None:
    """The active user owning the unrevoked token ``raw``, or None. Touches the DB."""
    if not raw or len(raw) > 200:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=ApiToken.hash_token(raw), revoked_at__isnull=True)
        .first()
    )
    if token is None or not token.user.is_active:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now_ms())
    return token.user


def get_or_create_user(username: str) -> tuple[Any, bool]:
    """Return ``(user, created)`` for ``username``; a new user has an unusable password."""
    model = get_user_model()
    user = model.objects.filter(username=username).first()
    if user is not None:
        return user, False
    user = model(username=username)
    user.set_unusable_password()
    user.save()
    return user, True


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def token_from_scope(scope: dict) -> str | None:
    """The raw token from ``Authorization: Bearer`` or the ``token`` query parameter, if any."""
    auth = _header(scope, b"authorization")
    if auth and auth.lower().startswith("bearer "):
        return auth[7:].strip()
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    values = query.get("token")
    return values[0] if values else None


def origin_allowed(scope: dict) -> bool:
    """True when a cookie-authenticated WebSocket comes from our own pages.

    The Origin must be the same origin as the request (same scheme, and its ``host:port`` equals
    the Host header, which must itself be an allowed host) or be listed in
    ``PICOBOT_CSRF_TRUSTED_ORIGINS`` (e.g. behind a TLS-terminating proxy). A
    missing Origin is refused. Host names alone are not enough: browsers send the session cookie
    to every port of a host, so another app on ``localhost:3000`` must not reach the chat.
    """
    origin = _header(scope, b"origin")
    if not origin:
        return False
    parsed = urlparse(origin.strip().lower())
    if parsed.scheme not in {"http", "https"} or not parsed.netloc:
        return False
    if f"{parsed.scheme}://{parsed.netloc}" in {o.lower().rstrip("/") for o in settings.CSRF_TRUSTED_ORIGINS}:
        return True
    host = (_header(scope, b"host") or "").strip().lower()
    if not host or parsed.netloc != host:
        return False
    # Same scheme too: an http:// page must not drive a wss:// chat (Django's CSRF check agrees).
    secure = scope.get("scheme") in {"wss", "https"}
    if parsed.scheme != ("https" if secure else "http"):
        return False
    return validate_host(split_domain_port(host)[0] or host, settings.ALLOWED_HOSTS)


class ChatAuthMiddleware:
    """ASGI middleware setting ``scope["user"]`` and ``scope["auth_method"]`` for WebSockets.

    ``auth_method`` is ``"token"``, ``"session"`` or None (anonymous: the consumer refuses it with
    close code 4401). A token that does not match never falls back to the cookie.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.session_stack = AuthMiddlewareStack(inner)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        scope = dict(scope)
        raw = token_from_scope(scope)
        if raw is not None:
            user = await database_sync_to_async(user_for_token)(raw)
            scope["user"] = user or AnonymousUser()
            scope["auth_method"] = "token" if user else None
            return await self.inner(scope, receive, send)
        if not origin_allowed(scope):
            scope["user"] = AnonymousUser()
            scope["auth_method"] = None
            return await self.inner(scope, receive, send)
        scope["auth_method"] = "session"
        return await self.session_stack(scope, receive, send)


class ApiTokenBackend:
    """Django auth backend: log in to the WebUI with a username and one of its API tokens.

    Lets a user created by ``manage.py createtoken`` (no password) use the WebUI; the token is
    checked exactly like a WebSocket or REST token.
    """

    def authenticate(self, request: Any, username: str | None = None, password: str | None = None, **_: Any) -> Any:
        if not username or not password:
            return None
        user = user_for_token(password)
        if user is None or user.get_username() != username:
            return None
        return user

    def get_user(self, user_id: Any) -> Any:
        model = get_user_model()
        user = model.objects.filter(pk=user_id).first()
        return user if user is not None and user.is_active else None
