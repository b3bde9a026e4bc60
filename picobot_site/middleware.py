"""Site-wide request hygiene (Django glue only).

``NulRefusingMiddleware`` answers 400 to a request whose path or query string holds a NUL
character (``%00``), and to a form post to the admin with one in any field. PostgreSQL cannot
hold NUL in text, so such a value reaching a query (an admin change page id, a changelist
filter, a raw-id field's lookup) would be a 500 there where SQLite answers "not found". Refusing
it up front gives one clear answer on both databases; under ``/api/`` the API's middleware
turns it into the JSON error ``bad_request`` (JSON bodies are the API's own validation). JSON
escapes (``"\\u0000"``) in the admin's JSON fields are that field's form error
(``conversations.admin.fields``).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBadRequest

from conversations.auth.middleware import SyncAndAsyncMiddleware

ADMIN_PREFIX = "/admin/"


def _holds_nul(request: HttpRequest) -> bool:
    if "\x00" in request.path or "%00" in request.META.get("QUERY_STRING", ""):
        return True
    if request.method == "POST" and request.path_info.startswith(ADMIN_PREFIX):
        # A form post (urlencoded or multipart): Django parses it once and keeps it.
        return any("\x00" in key or any("\x00" in v for v in values) for key, values in request.POST.lists())
    return False


def _refusal() -> HttpResponseBadRequest:
    return HttpResponseBadRequest(
        "bad request: a NUL character in the URL or the form (the database cannot store it)",
        content_type="text/plain",
    )


class NulRefusingMiddleware(SyncAndAsyncMiddleware):
    """400 "bad request: a NUL character …" for ``%00`` in the path or query, or in an admin form
    post (module docstring)."""

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        if _holds_nul(request):
            return _refusal()
        return self.get_response(request)

    async def __acall__(self, request: HttpRequest) -> Any:
        if _holds_nul(request):
            return _refusal()
        return await self.get_response(request)
