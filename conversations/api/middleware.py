"""HTTP details of ``/api/`` that Django's URL routing and ninja leave to us (PROTOCOL §2).

``ApiHttpMiddleware`` (in ``MIDDLEWARE``), for paths under ``/api/`` only:

* ``HEAD`` is served as ``GET`` without the body, with the headers a ``GET`` gets (its
  ``Content-Length`` included): load balancers and ``curl -I`` probe ``/api/health`` that way.
* every error that did not come from the API's own handlers becomes the API's JSON error
  ``{code, message, ref}``: a path no route matches (``GET /api/``, a path holding ``%0A``,
  which Django's converters never match) → 404; a method no operation can be declared for
  (``PROPFIND``, ``FOO``) → 405 with the path's real ``Allow`` list; Django's CSRF refusal of a
  write to the read-only schema and docs pages (``POST /api/docs``) → 405 as well, of a write
  elsewhere → 403 ``csrf_failed``; anything else keeps its status.

Both sync and async capable: the API's views are async, and an adapter here would hop threads.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBase

from conversations.api.errors import HTTP_ERROR_CODES, error_response
from conversations.auth.middleware import SyncAndAsyncMiddleware

API_PREFIX = "/api/"


def _under_api(request: HttpRequest) -> bool:
    path = request.path_info
    return path == API_PREFIX.rstrip("/") or path.startswith(API_PREFIX)


def _is_json(response: HttpResponseBase) -> bool:
    return str(response.get("Content-Type", "")).split(";")[0].strip().lower() == "application/json"


def _allowed_for(request: HttpRequest, response: HttpResponseBase) -> str | None:
    """The path's ``Allow`` list; None when it is no API path (the catch-all of unknown paths).

    A matched path that is no API operation is one of ninja's read-only schema/docs pages.
    """
    from conversations.api.methods import ALLOWED_METHODS

    match = getattr(request, "resolver_match", None)
    name = getattr(match, "url_name", None)
    if name in ALLOWED_METHODS:
        return ALLOWED_METHODS[name]
    if match is not None and response.status_code == 403:
        return "GET, HEAD"
    served = {m.strip().upper() for m in str(response.get("Allow", "")).split(",") if m.strip()}
    if "GET" in served:
        served.add("HEAD")
    return ", ".join(sorted(served))


class ApiHttpMiddleware(SyncAndAsyncMiddleware):
    """HEAD as GET without a body, and JSON 404/405 answers, for ``/api/`` (module docstring)."""

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        head = self._before(request)
        return self._after(request, self.get_response(request), head)

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        head = self._before(request)
        return self._after(request, await self.get_response(request), head)

    @staticmethod
    def _before(request: HttpRequest) -> bool:
        if request.method == "HEAD" and _under_api(request):
            request.method = "GET"
            return True
        return False

    @staticmethod
    def _after(request: HttpRequest, response: HttpResponseBase, head: bool) -> HttpResponseBase:
        if _under_api(request) and response.status_code >= 400 and not _is_json(response):
            response = _as_json_error(request, response)
        if head:
            request.method = "HEAD"
            if not response.streaming:
                response["Content-Length"] = str(len(response.content))
                response.content = b""
        return response


def _as_json_error(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """The API's JSON error for an error response Django (not the API) made (module docstring)."""
    status = response.status_code
    if status == 404:
        return error_response(request, 404, "not_found", "no such endpoint; see /api/docs")
    if status in (403, 405):
        allowed = _allowed_for(request, response)
        if status == 405 and allowed is None:
            return error_response(request, 404, "not_found", "no such endpoint; see /api/docs")
        if allowed is not None and request.method not in {m.strip() for m in allowed.split(",")}:
            return error_response(
                request, 405, "method_not_allowed", f"this path answers {allowed}", headers={"Allow": allowed}
            )
        if status == 403:  # Django's CsrfViewMiddleware: the only 403 not made by the API
            return error_response(
                request,
                403,
                "csrf_failed",
                "CSRF check failed: a session request that writes needs the X-CSRFToken header",
            )
    code = HTTP_ERROR_CODES.get(status, "internal_error" if status >= 500 else "error")
    message = getattr(response, "reason_phrase", "") or "request refused"
    if str(response.get("Content-Type", "")).startswith("text/plain") and not response.streaming:
        text = response.content[:300].decode("utf-8", "replace").strip()
        message = text or message  # a short plain-text reason (e.g. NulRefusingMiddleware's)
    return error_response(request, status, code, message)
