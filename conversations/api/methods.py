"""JSON answers for what no endpoint serves: a 404 for unknown paths under ``/api/``, and a 405
with ``Allow`` for a path's other methods (ninja's own answers are plain text)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.http import HttpRequest
from ninja import Router

from conversations.api.errors import ApiError

_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE")

ALLOWED_METHODS: dict[str, str | None] = {}
"""URL name of each path (its first operation's view name) → its ``Allow`` list (``None``: the
catch-all of unknown paths). ``conversations.api.middleware`` uses it for the 405 of methods no
operation can be declared for (``PROPFIND``, ``FOO``…)."""

fallback_router = Router()
"""The catch-all of unknown paths: mounted last."""


@fallback_router.api_operation(list(_METHODS), "/{path:unknown}", auth=None, include_in_schema=False)
async def unknown_path(request: HttpRequest, unknown: str) -> None:
    """Any other path under ``/api/``: a JSON 404, like every other error."""
    raise ApiError(404, "not_found", "no such endpoint; see /api/docs")


def _not_allowed_view(path: str, allowed: list[str]) -> Any:
    """A view raising 405 ``method_not_allowed`` (with ``Allow``) for ``path``'s other methods."""
    listed = ", ".join(allowed)

    def refuse() -> None:
        raise ApiError(405, "method_not_allowed", f"this path answers {listed}", headers={"Allow": listed})

    if "{message_id}" in path:  # an image of a message (``conversations.api.media``)

        async def not_allowed(request: HttpRequest, session_id: str, message_id: str, index: int) -> None:
            refuse()
    elif "{schedule_id}" in path:  # one schedule (``conversations.api.schedules``)

        async def not_allowed(request: HttpRequest, schedule_id: int) -> None:
            refuse()
    elif "{task_id}" in path:  # one background task (``conversations.api.tasks``)

        async def not_allowed(request: HttpRequest, task_id: str) -> None:
            refuse()
    elif "{path:session_id}" in path:

        async def not_allowed(request: HttpRequest, session_id: str) -> None:
            refuse()
    else:

        async def not_allowed(request: HttpRequest) -> None:
            refuse()

    not_allowed.__name__ = "not_allowed_" + "".join(c if c.isalnum() else "_" for c in path).strip("_")
    return not_allowed


def answer_other_methods_with_json_405(routers: Iterable[Router]) -> None:
    """Give every path of ``routers`` a hidden operation for the methods it does not serve: a JSON
    405 with ``Allow``, in the path's own router. A path with GET answers HEAD too (the middleware
    runs it as GET without the body), so HEAD is listed in ``Allow`` and never refused. Call it
    once every operation is declared, before the API's URLs are built."""
    for router in routers:
        for path, view in list(router.path_operations.items()):
            served = {method for op in view.operations for method in op.methods}
            url_name = view.operations[0].view_func.__name__
            if view.operations[0].view_func is unknown_path:
                ALLOWED_METHODS[url_name] = None
                continue
            allowed = sorted(served | ({"HEAD"} if "GET" in served else set()))
            ALLOWED_METHODS[url_name] = ", ".join(allowed)
            missing = [method for method in _METHODS if method not in allowed]
            if missing:
                router.api_operation(missing, path, auth=None, include_in_schema=False)(
                    _not_allowed_view(path, allowed)
                )
