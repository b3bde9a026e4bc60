"""Site-wide request hygiene (Django glue only).

``NulRefusingMiddleware`` answers 400 to a request whose path or query string holds a NUL
character (``%00``). PostgreSQL cannot hold NUL in text, so such a value reaching a query (an
admin change page id, a changelist filter) raised a 500 there while SQLite answered "not found".
Refusing it up front gives one clear answer on both databases; under ``/api/`` the API's
middleware turns it into the JSON error ``bad_request``. Form fields are covered by Django's
own ``ProhibitNullCharactersValidator``; JSON bodies by the API's validation.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBadRequest


def _holds_nul(request: HttpRequest) -> bool:
    return "\x00" in request.path or "%00" in request.META.get("QUERY_STRING", "")


class NulRefusingMiddleware:
    """400 "bad request: NUL character" for ``%00`` in the path or query (module docstring)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        if _holds_nul(request):
            return HttpResponseBadRequest("bad request: NUL character in the URL", content_type="text/plain")
        return self.get_response(request)

    async def __acall__(self, request: HttpRequest) -> Any:
        if _holds_nul(request):
            return HttpResponseBadRequest("bad request: NUL character in the URL", content_type="text/plain")
        return await self.get_response(request)
