"""Authentication for WebSocket and REST: API tokens, sessions, revocation (README.md here).

``tokens`` (create and check API tokens, the credentials of open sockets), ``websocket``
(``ChatAuthMiddleware`` and the revocation watch), ``backends`` (WebUI login with a token),
``middleware`` (``RevokedTokenSessionMiddleware`` and our sync-and-async middleware base).
Importing the package connects ``backends.remember_login_token`` to ``user_logged_in``.
"""

from conversations.auth.backends import ApiTokenBackend
from conversations.auth.middleware import RevokedTokenSessionMiddleware
from conversations.auth.tokens import (
    SESSION_TOKEN_KEY,
    TOKEN_PREFIX_CHARS,
    create_token,
    get_or_create_user,
    live_token,
    token_is_live,
    user_for_token,
)
from conversations.auth.websocket import CLOSE_REVOKED, ChatAuthMiddleware

__all__ = [
    "CLOSE_REVOKED",
    "SESSION_TOKEN_KEY",
    "TOKEN_PREFIX_CHARS",
    "ApiTokenBackend",
    "ChatAuthMiddleware",
    "RevokedTokenSessionMiddleware",
    "create_token",
    "get_or_create_user",
    "live_token",
    "token_is_live",
    "user_for_token",
]
