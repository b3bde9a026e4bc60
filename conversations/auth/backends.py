"""WebUI login with an API token (Django glue; touches the DB).

``ApiTokenBackend`` (in ``AUTHENTICATION_BACKENDS``) accepts a username with one of that user's
live API tokens as the password, so a user made by ``manage.py createtoken`` (no password) can
use the WebUI. ``remember_login_token`` keeps the token's id in the session
(``SESSION_TOKEN_KEY``), so that revoking the token ends the session too
(``conversations.auth.middleware``, ``conversations.auth.websocket``).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import BaseBackend
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver

from conversations.auth.tokens import SESSION_TOKEN_KEY, live_token


class ApiTokenBackend(BaseBackend):
    """Django auth backend: log in to the WebUI with a username and one of its API tokens.

    The token is checked exactly like a WebSocket or REST token. ``BaseBackend`` adds the async
    variants (``aget_user``: the async views' ``request.auser()``).
    """

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **_: Any
    ) -> Any:
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
