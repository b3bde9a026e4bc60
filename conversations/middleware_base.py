"""The base of our Django middleware that serves sync and async requests alike (Django glue).

Django's ``MiddlewareMixin`` would run a hook of an async request in a thread
(``sync_to_async``); these middlewares do their work on the event loop for async views and in
the request thread for sync ones, with no hop. A subclass implements ``__call__`` for sync
requests (dispatching async ones with ``if self.is_async: return self.__acall__(request)``)
and ``__acall__`` for async ones.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction


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
