"""WebUI login with an API token, and the per-address login throttle (Django glue; touches the DB).

``ApiTokenBackend`` (in ``AUTHENTICATION_BACKENDS``) accepts a username with one of that user's
live API tokens as the password, so a user made by ``manage.py createtoken`` (no password) can
use the WebUI. ``remember_login_token`` keeps the token's id in the session
(``SESSION_TOKEN_KEY``), so that revoking the token ends the session too
(``conversations.auth.middleware``, ``conversations.auth.websocket``).

``AddressThrottleBackend`` (second in ``AUTHENTICATION_BACKENDS``, after axes' per-account lock)
refuses every login from a client address with too many failed sign-ins — wrong passwords on any
account and wrong API tokens alike (``throttle``, ``PICOBOT_AUTH_FAILURES_PER_ADDRESS``) — before
any password is hashed: one address guessing across many accounts is stopped too (issue 16).
``count_failed_login`` (``user_login_failed``) counts a failed login toward its address.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import BaseBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver

from conversations.auth import throttle
from conversations.auth.tokens import SESSION_TOKEN_KEY, live_token


class AddressThrottleBackend:
    """Django auth backend that only refuses: a login from an address over its sign-in failure
    limit raises ``PermissionDenied`` (no later backend runs) and is answered by the lockout page
    (axes' middleware reads ``request.axes_locked_out``; ``lockout.lockout_response`` the wait in
    ``request.picobot_retry_after``). Otherwise it answers None and the next backend decides.
    No ``get_user``: it never logs anyone in (``force_login`` and sessions skip it)."""

    def authenticate(self, request: Any, **_: Any) -> None:
        if request is None:  # no address to count (a management command, a test's authenticate())
            return None
        retry_after = throttle.sign_in_retry_after(throttle.request_address(request))
        if retry_after is not None:
            request.axes_locked_out = True
            request.picobot_retry_after = retry_after
            raise PermissionDenied(throttle.too_many_failures_message(retry_after))
        return None

    async def aauthenticate(self, request: Any, **credentials: Any) -> None:
        return self.authenticate(request, **credentials)  # in memory: no thread hop needed


def refused_by_address(request: Any, credentials: Any = None) -> bool:
    """``AXES_WHITELIST_CALLABLE``: a login this backend refused was never checked, so axes must not
    count it against the account (a right password from a blocked address would lock its owner)."""
    return getattr(request, "picobot_retry_after", None) is not None


@receiver(user_login_failed, dispatch_uid="picobot-count-failed-login")
def count_failed_login(sender: Any, credentials: Any = None, request: Any = None, **_: Any) -> None:
    """Count a failed login toward its client address, unless it was refused for being locked
    (a refused try does not extend the wait, as axes does for an account)."""
    if request is not None and not getattr(request, "axes_locked_out", False):
        throttle.sign_in_failed(throttle.request_address(request))


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
