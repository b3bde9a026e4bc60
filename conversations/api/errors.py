"""Errors of the REST control API (PROTOCOL §2): every error is JSON ``{code, message, ref}``.

``ref`` identifies the server log entry of the error (DESIGN §9: a reference id, never a stack
trace or a provider payload). A 422 adds ``errors`` (``[{loc, msg, type}]``, the rejected input is
never echoed); a 503 from ``/api/ready`` adds ``checks``.

The status codes and their ``code`` values: ``README.md``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from conversations import storage

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
"""Bodies over this many bytes answer 413 (PROTOCOL §2)."""

JSON_CONTENT_TYPE = "application/json; charset=utf-8"
"""Every error body is UTF-8 JSON (``ensure_ascii=False``): say so."""

INBOX_FULL_RETRY_AFTER = 10
"""``Retry-After`` seconds of a 429 ``inbox_full``: roughly a turn's length."""

HTTP_ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    422: "validation_error",
    429: "too_many_requests",
    503: "unavailable",
}


class ApiError(Exception):
    """An error answer: raise it from a view (or an auth class) to send ``{code, message, ref}``.

    Args:
        status: the HTTP status.
        code: the machine-readable code (see the module docstring).
        message: what went wrong, for a person (never a stack trace or a provider payload).
        headers: extra response headers (``Retry-After``…).
        extra: extra top-level members of the body (``checks``…).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.extra = extra or {}


def error_response(
    request: HttpRequest,
    status: int,
    code: str,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
    exc_info: BaseException | None = None,
) -> HttpResponse:
    """The JSON error response; logs one line carrying the same ``ref`` (5xx as errors)."""
    ref = secrets.token_hex(4)
    # The path may hold anything a client sent (%0A…): one printable log line, bounded.
    path = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(getattr(request, "path", "?"))[:300])
    where = f"{request.method} {path}"
    if status >= 500:
        log.error("api %s → %d %s (ref %s): %s", where, status, code, ref, message, exc_info=exc_info)
    else:
        log.info("api %s → %d %s (ref %s): %s", where, status, code, ref, message)
    response = JsonResponse(
        {"code": code, "message": message, "ref": ref, **(extra or {})},
        status=status,
        content_type=JSON_CONTENT_TYPE,
        json_dumps_params={"ensure_ascii": False},
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _validation_issues(errors: list[dict]) -> list[dict]:
    """ninja's errors without the rejected ``input`` (it may be 32 000 characters, or a secret)."""
    issues = []
    for error in errors:
        loc = [part if isinstance(part, int) else str(part) for part in error.get("loc", ())]
        issues.append(
            {"loc": loc, "msg": str(error.get("msg", "invalid")), "type": str(error.get("type", "invalid"))}
        )
    return issues


def _on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    issues = _validation_issues(list(exc.errors))
    if issues:
        first = issues[0]
        place = ".".join(str(p) for p in first["loc"] if p not in ("body", "payload")) or "request"
        message = f"{place}: {first['msg']}" + (f" (and {len(issues) - 1} more)" if len(issues) > 1 else "")
    else:
        message = "the request is invalid"
    return error_response(request, 422, "validation_error", message, extra={"errors": issues})


def _on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    status = exc.status_code
    message = exc.message if status != 400 else "the request body is not valid JSON"
    return error_response(request, status, HTTP_ERROR_CODES.get(status, "error"), message)


def _on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    if isinstance(exc, (OperationalError, InterfaceError)):
        # run_storage already retried: the database is down or locked for longer than a moment.
        return error_response(
            request,
            503,
            "unavailable",
            "the database is unavailable; try again shortly",
            headers={"Retry-After": "5"},
            exc_info=exc,
        )
    return error_response(
        request, 500, "internal_error", "the server could not handle this request", exc_info=exc
    )


def install_error_handlers(api: NinjaAPI) -> None:
    """Answer every error of ``api`` as ``{code, message, ref}`` (ninja looks handlers up by MRO)."""
    api.add_exception_handler(ApiError, _on_api_error)
    api.add_exception_handler(ValidationError, _on_validation_error)
    api.add_exception_handler(AuthenticationError, _on_unauthenticated)
    api.add_exception_handler(HttpError, _on_http_error)
    api.add_exception_handler(Http404, _on_not_found)
    api.add_exception_handler(storage.NotFoundError, _on_not_found)
    api.add_exception_handler(storage.InboxFullError, _on_inbox_full)
    api.add_exception_handler(storage.BudgetExceededError, _on_budget_exceeded)
    api.add_exception_handler(RequestDataTooBig, _on_too_large)
    api.add_exception_handler(Exception, _on_unexpected)


def _on_api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return error_response(request, exc.status, exc.code, exc.message, headers=exc.headers, extra=exc.extra)


def _on_unauthenticated(request: HttpRequest, exc: Exception) -> HttpResponse:
    return error_response(
        request,
        401,
        "unauthorized",
        "authentication required: send Authorization: Bearer <token>, or log in for a session",
        headers={"WWW-Authenticate": 'Bearer realm="picobot"'},
    )


def _on_not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
    message = str(exc) if isinstance(exc, storage.NotFoundError) else "no such resource"
    return error_response(request, 404, "not_found", message)


def _on_inbox_full(request: HttpRequest, exc: Exception) -> HttpResponse:
    return error_response(
        request,
        429,
        "inbox_full",
        f"{exc}; send again once some have run",
        headers={"Retry-After": str(INBOX_FULL_RETRY_AFTER)},
    )


def _on_budget_exceeded(request: HttpRequest, exc: Exception) -> HttpResponse:
    """429 ``budget_exceeded`` (issue 17), ``Retry-After`` until the budget resets (UTC midnight)."""
    resets_at = exc.refusal.resets_at.timestamp()  # type: ignore[attr-defined]
    retry_after = max(1, int(resets_at - time.time() + 0.999))
    return error_response(
        request, 429, "budget_exceeded", str(exc), headers={"Retry-After": str(retry_after)}
    )


def _on_too_large(request: HttpRequest, exc: Exception) -> HttpResponse:
    return error_response(request, 413, "body_too_large", _too_large_message())


def _too_large_message() -> str:
    return f"the request body exceeds {MAX_BODY_BYTES} bytes (1 MiB)"


def oversized_body(request: HttpRequest) -> bool:
    """True when the body is over ``MAX_BODY_BYTES``: by its ``Content-Length`` first (nothing is
    parsed then), else by the bytes actually received (a missing or lying header)."""
    declared = request.META.get("CONTENT_LENGTH")
    if declared:
        try:
            if int(declared) > MAX_BODY_BYTES:
                return True
        except ValueError:
            pass  # a malformed header: judge by the bytes
    try:
        return len(request.body) > MAX_BODY_BYTES
    except RequestDataTooBig:
        return True


def limit_body(run: Callable) -> Callable:
    """ninja ``view`` decorator: a body over 1 MiB answers 413 before authentication and parsing."""
    if inspect.iscoroutinefunction(run):

        @functools.wraps(run)
        async def async_wrapper(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            if oversized_body(request):
                return error_response(request, 413, "body_too_large", _too_large_message())
            return await run(request, **kwargs)

        return async_wrapper

    @functools.wraps(run)
    def sync_wrapper(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        if oversized_body(request):
            return error_response(request, 413, "body_too_large", _too_large_message())
        return run(request, **kwargs)

    return sync_wrapper
