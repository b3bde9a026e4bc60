"""WebSocket authentication (DESIGN §9, PROTOCOL §1 "Authentication"; Channels glue).

``ChatAuthMiddleware`` sets ``scope["user"]`` and ``scope["auth_method"]`` (``"token"``,
``"session"`` or None: anonymous, refused by the consumer with 4401). A socket authenticates by
``Authorization: Bearer <token>`` or ``?token=<token>`` (no Origin needed), or by the Django
session cookie, accepted only from an allowed Origin (``origin_allowed``: cross-site WebSocket
hijacking). A token that does not match never falls back to the cookie.

An open socket stays open only while its credential holds: a token while unexpired, unrevoked
and its user active; a session logged in with a token while that token does and the session
exists; a password login while its user is active, the password unchanged (Django's session
hash) and the session exists (a logout in any tab flushes it). One task per event loop checks
the credentials of all its sockets every ``REVOCATION_CHECK_SECONDS`` (at most three queries)
and closes a dead one's sockets with ``CLOSE_REVOKED``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from typing import Any
from urllib.parse import parse_qs, urlparse

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY
from django.contrib.auth.models import AnonymousUser
from django.http.request import split_domain_port, validate_host

from conversations.auth import throttle
from conversations.auth.tokens import (
    SESSION_TOKEN_KEY,
    Credential,
    dead_credentials,
    live_token,
    token_is_live,
)
from conversations.storage.runner import run_storage

log = logging.getLogger(__name__)

REVOCATION_CHECK_SECONDS = 2.0
"""How often a process checks the credentials of its open WebSockets (one query for all the
tokens, one for all the password sessions)."""
CLOSE_REVOKED = 4401  # = conversations.chat.consumer.CLOSE_UNAUTHORIZED
CLOSE_TOO_MANY_FAILURES = 4429
"""Too many failed tokens from the client's address (PROTOCOL §1): retry after the seconds the
close reason and the ``error`` frame's ``retry_after`` give."""


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


class _RevocationWatch:
    """The credentials of one event loop's open WebSockets, checked together every
    ``REVOCATION_CHECK_SECONDS`` (``dead_credentials``: at most three queries whatever the number
    of sockets); a dead credential's sockets are revoked (``_RevocableReceive.revoke``)."""

    def __init__(self) -> None:
        self.sockets: dict[Credential, set[_RevocableReceive]] = {}
        self.task: asyncio.Task | None = None

    def add(self, credential: Credential, socket: _RevocableReceive) -> None:
        self.sockets.setdefault(credential, set()).add(socket)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def discard(self, credential: Credential, socket: _RevocableReceive) -> None:
        sockets = self.sockets.get(credential)
        if sockets is not None:
            sockets.discard(socket)
            if not sockets:
                del self.sockets[credential]

    async def _run(self) -> None:
        while self.sockets:
            await asyncio.sleep(REVOCATION_CHECK_SECONDS)
            credentials = list(self.sockets)
            if not credentials:
                break
            try:  # on the agent's storage threads, not the thread sync views share (DESIGN §2)
                dead = await run_storage(dead_credentials, credentials, retry=False)
            except Exception:
                log.warning("could not check the credentials of open WebSockets; trying again", exc_info=True)
                continue
            for credential in dead:
                for socket in list(self.sockets.get(credential, ())):
                    socket.revoke()


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _RevocationWatch] = weakref.WeakKeyDictionary()


def _revocation_watch() -> _RevocationWatch:
    loop = asyncio.get_running_loop()
    watch = _watches.get(loop)
    if watch is None:
        watch = _watches[loop] = _RevocationWatch()
    return watch


class _RevocableReceive:
    """The ASGI ``receive`` of one authenticated WebSocket, ended by :meth:`revoke`.

    While the consumer waits in ``receive()``, ``revoke`` cancels that wait (the waiting task is
    un-cancelled here, so only this one wait ends); the call, and every later one, closes the
    socket (4401, ``reason``) and returns ``websocket.disconnect``. A frame that was on its way
    when the credential died is not handed to the consumer. Costs nothing per frame: no task or
    future beside the consumer's own wait.
    """

    def __init__(self, receive: Any, send: Any, reason: str) -> None:
        self._receive = receive
        self._send = send
        self._reason = reason
        self._revoked = False
        self._reader: asyncio.Task | None = None  # the task waiting in receive(), if any
        self._interrupting = False

    def revoke(self) -> None:
        if self._revoked:
            return
        self._revoked = True
        if self._reader is not None and not self._reader.done():
            self._interrupting = True
            self._reader.cancel()

    async def __call__(self) -> dict:
        if not self._revoked:
            task = self._reader = asyncio.current_task()
            try:
                message = await self._receive()
            except asyncio.CancelledError:
                if not self._interrupting or task is None:
                    raise
                self._interrupting = False
                if task.uncancel() > 0:  # cancelled by someone else too: that one stands
                    raise
            else:
                if not self._revoked:
                    return message
            finally:
                self._reader = None
        with contextlib.suppress(Exception):  # already closed by the consumer: nothing to send
            await self._send({"type": "websocket.close", "code": CLOSE_REVOKED, "reason": self._reason})
        return {"type": "websocket.disconnect", "code": CLOSE_REVOKED}


async def _closed_when_revoked(
    inner: Any, scope: dict, receive: Any, send: Any, credential: Credential
) -> Any:
    """Run ``inner`` for a WebSocket authenticated by ``credential``; when it stops holding while
    the socket is open (token revoked, user deactivated, password changed), close the socket
    (4401 with the reason) and tell ``inner`` it disconnected."""
    if credential[0] == "token" and credential[2] is None:
        reason = "API token revoked or expired"
    elif credential[0] == "token":
        reason = "signed out: logged out, or the login token was revoked or expired"
    else:
        reason = "signed out: logged out, deactivated, or the password changed"
    guarded = _RevocableReceive(receive, send, reason)
    watch = _revocation_watch()
    watch.add(credential, guarded)
    try:
        return await inner(scope, guarded, send)
    finally:
        watch.discard(credential, guarded)


class _SessionTokenCheck:
    """Inside the session stack: a session logged in with an API token that is revoked now is
    anonymous (refused, 4401); one whose token is live is watched by ``(token id, session key)``,
    and a password login's socket by ``(user id, session hash, session key)``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        session = scope.get("session")
        token_id = (
            await database_sync_to_async(session.get)(SESSION_TOKEN_KEY) if session is not None else None
        )
        session_key = session.session_key if session is not None else None
        if token_id is None:
            user = scope.get("user")
            if scope.get("type") != "websocket" or user is None or not user.is_authenticated:
                return await self.inner(scope, receive, send)
            session_hash = await database_sync_to_async(session.get)(HASH_SESSION_KEY)
            return await _closed_when_revoked(
                self.inner, scope, receive, send, ("session", user.pk, session_hash, session_key)
            )
        scope = dict(scope)
        if not await database_sync_to_async(token_is_live)(token_id):
            scope["user"] = AnonymousUser()
            scope["auth_method"] = None
            return await self.inner(scope, receive, send)
        return await _closed_when_revoked(
            self.inner, scope, receive, send, ("token", int(token_id), session_key)
        )


class ChatAuthMiddleware:
    """ASGI middleware setting ``scope["user"]`` and ``scope["auth_method"]`` for WebSockets.

    ``auth_method`` is ``"token"``, ``"session"`` or None (anonymous: the consumer refuses it with
    close code 4401). A token from an address with too many failed tokens is not looked up:
    ``scope["auth_retry_after"]`` (seconds) makes the consumer close with ``CLOSE_TOO_MANY_FAILURES``. A token that does not match never falls back to the cookie. A session
    logged in with a token that is revoked now is anonymous too; a socket authenticated by a
    token (directly or through such a session) is closed with 4401 when the token is revoked.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.session_stack = AuthMiddlewareStack(_SessionTokenCheck(inner))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        scope = dict(scope)
        raw = token_from_scope(scope)
        if raw is not None:
            address = throttle.scope_address(scope)
            retry_after = throttle.sign_in_retry_after(address)
            if retry_after is not None:  # refused without a lookup (issue 16)
                scope["user"] = AnonymousUser()
                scope["auth_method"] = None
                scope["auth_retry_after"] = retry_after
                return await self.inner(scope, receive, send)
            token = await database_sync_to_async(live_token)(raw)
            if token is None:
                throttle.sign_in_failed(address)
            scope["user"] = token.user if token is not None else AnonymousUser()
            scope["auth_method"] = "token" if token is not None else None
            if token is None or scope.get("type") != "websocket":
                return await self.inner(scope, receive, send)
            return await _closed_when_revoked(self.inner, scope, receive, send, ("token", token.pk, None))
        if not origin_allowed(scope):
            scope["user"] = AnonymousUser()
            scope["auth_method"] = None
            return await self.inner(scope, receive, send)
        scope["auth_method"] = "session"
        return await self.session_stack(scope, receive, send)
