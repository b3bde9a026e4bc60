"""API tokens and the credentials that keep a connection open (DESIGN §9; touches the DB).

A token is ``"pb_"`` + 43 random URL-safe characters, shown once; only its SHA-256 hash and its
first ``TOKEN_PREFIX_CHARS`` characters are stored (``ApiToken``). A token is live while it is
unrevoked, unexpired (``expires_at``) and its user active. A credential names what keeps a WebSocket open (``Credential``);
``dead_credentials`` checks any number of them in at most three queries. ``get_or_create_user``
makes the users ``manage.py createtoken`` hands tokens to.
"""

from __future__ import annotations

import secrets
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from conversations.models import ApiToken, now_ms

TOKEN_PREFIX_CHARS = 8
SESSION_TOKEN_KEY = "picobot_api_token_id"
"""Session key holding the id of the API token a WebUI session logged in with (none: a password)."""


def create_token(user: Any, name: str = "", *, expires_at: int | None = None) -> str:
    """Create and return a new raw API token for ``user`` (touches the DB; shown once);
    ``expires_at`` (epoch ms) ends it then, None never."""
    raw = "pb_" + secrets.token_urlsafe(32)
    ApiToken.objects.create(
        user=user,
        name=name,
        prefix=raw[:TOKEN_PREFIX_CHARS],
        token_hash=ApiToken.hash_token(raw),
        expires_at=expires_at,
    )
    return raw


def unexpired() -> Q:
    """Tokens that have not expired now (no ``expires_at``, or one still ahead)."""
    return Q(expires_at__isnull=True) | Q(expires_at__gt=now_ms())


def live_token(raw: str) -> ApiToken | None:
    """The unrevoked, unexpired token ``raw`` of an active user (its ``user`` loaded), or None;
    stamps its ``last_used_at``. Looked up by its SHA-256 hash: the comparison is the index's,
    never a character-by-character one of the secret. Touches the DB."""
    if not raw or len(raw) > 200:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(unexpired(), token_hash=ApiToken.hash_token(raw), revoked_at__isnull=True)
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
    """Whether the token with this id is unrevoked, unexpired and its user active (one indexed query)."""
    try:
        pk = int(token_id)
    except (TypeError, ValueError):
        return False
    return ApiToken.objects.filter(unexpired(), pk=pk, revoked_at__isnull=True, user__is_active=True).exists()


def dead_tokens(token_ids: list[int]) -> set[int]:
    """Which of these token ids are revoked or expired (or their user deactivated, or gone): one query."""
    live = set(
        ApiToken.objects.filter(
            unexpired(), pk__in=token_ids, revoked_at__isnull=True, user__is_active=True
        ).values_list("pk", flat=True)
    )
    return set(token_ids) - live


Credential = tuple
"""What keeps a WebSocket open: ``("token", token_id, session_key | None)`` (a bearer token, or a
WebUI session logged in with that token) or ``("session", user_id, session_hash, session_key)``
(a password login)."""


def gone_sessions(session_keys: set[str]) -> set[str]:
    """Which of these session keys name no live session any more (logged out: Django's logout
    flushes it; expired; deleted). One query with the database engines; a cookie-only engine
    (``signed_cookies``) keeps nothing on the server, so nothing is known gone."""
    if not session_keys:
        return set()
    engine = settings.SESSION_ENGINE
    if engine.endswith("signed_cookies"):
        return set()
    if engine in ("django.contrib.sessions.backends.db", "django.contrib.sessions.backends.cached_db"):
        from django.contrib.sessions.models import Session

        live = set(
            Session.objects.filter(session_key__in=session_keys, expire_date__gt=timezone.now()).values_list(
                "session_key", flat=True
            )
        )
        return session_keys - live
    store = import_module(engine).SessionStore
    return {key for key in session_keys if not store().exists(key)}


def dead_credentials(credentials: list[Credential]) -> set[Credential]:
    """Which of these credentials no longer hold: at most three queries for any number of them.

    A token is dead when revoked, expired, or its user is inactive or gone (``dead_tokens``); a
    password session when its user is inactive or gone, or its session hash no longer matches
    (the password changed — Django then also ends the user's HTTP sessions); either, when it
    came with a session key, once that session is gone (``gone_sessions``: logged out in any tab).
    """
    token_credentials = [c for c in credentials if c[0] == "token"]
    sessions = [c for c in credentials if c[0] == "session"]
    dead_ids = dead_tokens([c[1] for c in token_credentials]) if token_credentials else set()
    dead: set[Credential] = {c for c in token_credentials if c[1] in dead_ids}
    gone = gone_sessions({c[-1] for c in credentials if c[-1]})
    dead.update(c for c in credentials if c[-1] and c[-1] in gone)
    if sessions:
        users = {
            u.pk: u for u in get_user_model().objects.filter(pk__in={c[1] for c in sessions}, is_active=True)
        }
        for credential in sessions:
            user = users.get(credential[1])
            if user is None or not constant_time_compare(credential[2] or "", user.get_session_auth_hash()):
                dead.add(credential)
    return dead


def get_or_create_user(username: str) -> tuple[Any, bool]:
    """Return ``(user, created)`` for ``username``; a new user has an unusable password.

    The name is normalised as Django's login form does (NFKC: ``ｆｕｌｌ`` → ``full``) before the
    lookup, so a user made here can always log in; a user stored under the exact, unnormalised
    name is still found first.
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
