"""Django HTTP middleware that serves sync and async requests alike (Django glue).

``SyncAndAsyncMiddleware`` is the base of our middlewares (this one, the API's and the site's):
Django's ``MiddlewareMixin`` would run a hook of an async request in a thread
(``sync_to_async``); these do their work on the event loop for async views and in the request
thread for sync ones, with no hop. A subclass implements ``__call__`` for sync requests
(dispatching async ones with ``if self.is_async: return self.__acall__(request)``) and
``__acall__`` for async ones.

``RevokedTokenSessionMiddleware`` (in ``MIDDLEWARE``, after ``AuthenticationMiddleware``) logs
out a WebUI session whose login token was revoked (``conversations.auth.backends``).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from channels.db import database_sync_to_async
from django.contrib.auth import alogout, logout

from conversations.auth.tokens import SESSION_TOKEN_KEY, token_is_live


class SyncAndAsyncMiddleware:
    """Holds ``get_response`` and ``is_async`` (whether the chain below is async); marks the
    instance as a coroutine function for an async chain, as Django requires."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)


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
