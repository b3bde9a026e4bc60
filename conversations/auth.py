"""Authentication for WebSocket and REST (DESIGN §9, PROTOCOL §1 "Authentication").

API tokens are random strings shown once; only their SHA-256 hash and an 8-character prefix are
stored (``ApiToken``). A WebSocket authenticates by ``Authorization: Bearer <token>`` or
``?token=<token>`` (no Origin needed), or by the Django session cookie, which is accepted only from
an allowed Origin (cross-site WebSocket hijacking).

Revoking a token (``manage.py revoketoken``, the admin) ends everything it opened:

* REST and new WebSockets check the token on every request / handshake;
* a WebUI session logged in *with* a token (``ApiTokenBackend``) remembers the token's id
  (``SESSION_TOKEN_KEY``); ``RevokedTokenSessionMiddleware`` logs such a session out on its next
  request once the token is revoked, and a WebSocket handshake with it is refused;
* open WebSockets authenticated by a token (directly or through such a session) are closed with
  code 4401 within ``REVOCATION_CHECK_SECONDS``: one query per process checks the tokens of all
  its open sockets (``ChatAuthMiddleware``).

Deactivating (or deleting) a user ends all of it too, and so does a password change for the
sockets of a password login (Django's session hash, as for its own HTTP sessions): those
sockets are watched by ``(user id, session hash)`` in the same periodic check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import weakref
from typing import Any
from urllib.parse import parse_qs, urlparse

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, alogout, get_user_model, logout
from django.contrib.auth.backends import BaseBackend
from django.contrib.auth.models import AnonymousUser
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http.request import split_domain_port, validate_host
from django.utils.crypto import constant_time_compare

from conversations.middleware_base import SyncAndAsyncMiddleware
from conversations.models import ApiToken, now_ms
from conversations.storage.runner import run_storage

log = logging.getLogger(__name__)

TOKEN_PREFIX_CHARS = 8
SESSION_TOKEN_KEY = "picobot_api_token_id"
"""Session key holding the id of the API token a WebUI session logged in with (none: a password)."""
REVOCATION_CHECK_SECONDS = 2.0
"""How often a process checks the tokens of its open token-authenticated WebSockets (one query
for all of them)."""
CLOSE_REVOKED = 4401  # = conversations.chat.consumer.CLOSE_UNAUTHORIZED


def create_token(user: Any, name: str = "") -> str:
    """Create and return a new raw API token for ``user`` (touches the DB; shown once)."""
    raw = "pb_" + secrets.token_urlsafe(32)
    ApiToken.objects.create(
        user=user, name=name, prefix=raw[:TOKEN_PREFIX_CHARS], token_hash=ApiToken.hash_token(raw)
    )
    return raw


def live_token(raw: str) -> ApiToken | None:
    """The unrevoked token ``raw`` of an active user (its ``user`` loaded), or None; stamps its
    ``last_used_at``. Touches the DB."""
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
    return token


def user_for_token(raw: str) -> Any | None:
    """The active user owning the unrevoked token ``raw``, or None. Touches the DB."""
    token = live_token(raw)
    return token.user if token is not None else None


def token_is_live(token_id: Any) -> bool:
    """Whether the token with this id is unrevoked and its user active (one indexed query)."""
    try:
        pk = int(token_id)
    except (TypeError, ValueError):
        return False
    return ApiToken.objects.filter(pk=pk, revoked_at__isnull=True, user__is_active=True).exists()


def dead_tokens(token_ids: list[int]) -> set[int]:
    """Which of these token ids are revoked (or their user deactivated, or gone): one query."""
    live = set(
        ApiToken.objects.filter(pk__in=token_ids, revoked_at__isnull=True, user__is_active=True)
        .values_list("pk", flat=True)
    )
    return set(token_ids) - live


Credential = tuple
"""What keeps a WebSocket open: ``("token", token_id)`` or ``("session", user_id, session_hash)``."""


def dead_credentials(credentials: list[Credential]) -> set[Credential]:
    """Which of these credentials no longer hold: at most two queries for any number of them.

    A token is dead when revoked or its user is inactive or gone (``dead_tokens``); a password
    session when its user is inactive or gone, or its session hash no longer matches (the
    password changed — Django then also ends the user's HTTP sessions).
    """
    tokens = [c[1] for c in credentials if c[0] == "token"]
    sessions = [c for c in credentials if c[0] == "session"]
    dead: set[Credential] = {("token", pk) for pk in dead_tokens(tokens)} if tokens else set()
    if sessions:
        users = {u.pk: u for u in get_user_model().objects.filter(pk__in={c[1] for c in sessions}, is_active=True)}
        for credential in sessions:
            user = users.get(credential[1])
            if user is None or not constant_time_compare(credential[2] or "", user.get_session_auth_hash()):
                dead.add(credential)
    return dead


def get_or_create_user(username: str) -> tuple[Any, bool]:
    """Return ``(user, created)`` for ``username``; a new user has an unusable password.

    The name is normalised as Django's login form does (NFKC: ``ｆｕｌｌ`` → ``full``) before the
    lookup, so a user made here can always log in; an existing user stored under the exact,
    unnormalised name (made before this rule) is still found first.
    """
    model = get_user_model()
    user = model.objects.filter(username=username).first()
    if user is not None:
        return user, False
    username = model.normalize_username(username)
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


class _RevocationWatch:
    """The credentials of one event loop's open WebSockets, checked together every
    ``REVOCATION_CHECK_SECONDS`` (``dead_credentials``: at most two queries whatever the number
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


async def _closed_when_revoked(inner: Any, scope: dict, receive: Any, send: Any, credential: Credential) -> Any:
    """Run ``inner`` for a WebSocket authenticated by ``credential``; when it stops holding while
    the socket is open (token revoked, user deactivated, password changed), close the socket
    (4401 with the reason) and tell ``inner`` it disconnected."""
    reason = "API token revoked" if credential[0] == "token" else "signed out: the user was deactivated or changed password"
    guarded = _RevocableReceive(receive, send, reason)
    watch = _revocation_watch()
    watch.add(credential, guarded)
    try:
        return await inner(scope, guarded, send)
    finally:
        watch.discard(credential, guarded)


class _SessionTokenCheck:
    """Inside the session stack: a session logged in with an API token that is revoked now is
    anonymous (refused, 4401); one whose token is live is watched like a token connection, and a
    password login's socket is watched by ``(user id, session hash)``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        session = scope.get("session")
        token_id = await database_sync_to_async(session.get)(SESSION_TOKEN_KEY) if session is not None else None
        if token_id is None:
            user = scope.get("user")
            if scope.get("type") != "websocket" or user is None or not user.is_authenticated:
                return await self.inner(scope, receive, send)
            session_hash = await database_sync_to_async(session.get)(HASH_SESSION_KEY)
            return await _closed_when_revoked(self.inner, scope, receive, send, ("session", user.pk, session_hash))
        scope = dict(scope)
        if not await database_sync_to_async(token_is_live)(token_id):
            scope["user"] = AnonymousUser()
            scope["auth_method"] = None
            return await self.inner(scope, receive, send)
        return await _closed_when_revoked(self.inner, scope, receive, send, ("token", int(token_id)))


class ChatAuthMiddleware:
    """ASGI middleware setting ``scope["user"]`` and ``scope["auth_method"]`` for WebSockets.

    ``auth_method`` is ``"token"``, ``"session"`` or None (anonymous: the consumer refuses it with
    close code 4401). A token that does not match never falls back to the cookie. A session
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
            token = await database_sync_to_async(live_token)(raw)
            scope["user"] = token.user if token is not None else AnonymousUser()
            scope["auth_method"] = "token" if token is not None else None
            if token is None or scope.get("type") != "websocket":
                return await self.inner(scope, receive, send)
            return await _closed_when_revoked(self.inner, scope, receive, send, ("token", token.pk))
        if not origin_allowed(scope):
            scope["user"] = AnonymousUser()
            scope["auth_method"] = None
            return await self.inner(scope, receive, send)
        scope["auth_method"] = "session"
        return await self.session_stack(scope, receive, send)


class ApiTokenBackend(BaseBackend):
    """Django auth backend: log in to the WebUI with a username and one of its API tokens.

    Lets a user created by ``manage.py createtoken`` (no password) use the WebUI; the token is
    checked exactly like a WebSocket or REST token. ``BaseBackend`` adds the async variants
    (``aget_user``: the async views' ``request.auser()``).
    """

    def authenticate(self, request: Any, username: str | None = None, password: str | None = None, **_: Any) -> Any:
        if not username or not password:
            return None
        token = live_token(password)
        if token is None or token.user.get_username() != username:
            return None
        user = token.user
        user.picobot_token_id = token.pk  # kept in the session by remember_login_token()
        return user

    def get_user(self, user_id: Any) -> Any:
        model = get_user_model()
        user = model.objects.filter(pk=user_id).first()
        return user if user is not None and user.is_active else None


@receiver(user_logged_in, dispatch_uid="picobot-remember-login-token")
def remember_login_token(sender: Any, request: Any, user: Any, **_: Any) -> None:
    """Keep the id of the token a WebUI session logged in with (``ApiTokenBackend``), so that
    revoking the token ends the session; a password login of the same session forgets it."""
    session = getattr(request, "session", None)
    if session is None:
        return
    token_id = getattr(user, "picobot_token_id", None)
    if token_id is not None:
        session[SESSION_TOKEN_KEY] = token_id
    else:
        session.pop(SESSION_TOKEN_KEY, None)


class RevokedTokenSessionMiddleware(SyncAndAsyncMiddleware):
    """Log out a session whose login token was revoked (or whose user was deactivated), on its
    next request: one indexed query, and only for sessions logged in with a token. Goes after
    ``AuthenticationMiddleware``. Sync and async capable (no thread hop for async views)."""

    def __call__(self, request: Any) -> Any:
        if self.is_async:
            return self.__acall__(request)
        session = getattr(request, "session", None)
        token_id = session.get(SESSION_TOKEN_KEY) if session is not None else None
        if token_id is not None and not token_is_live(token_id):
            logout(request)
        return self.get_response(request)

    async def __acall__(self, request: Any) -> Any:
        session = getattr(request, "session", None)
        token_id = await session.aget(SESSION_TOKEN_KEY) if session is not None else None
        if token_id is not None and not await database_sync_to_async(token_is_live)(token_id):
            await alogout(request)
        return await self.get_response(request)
