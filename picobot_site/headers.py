"""Security headers (issue 16): the Content-Security-Policy and its same-origin WebSocket sources.

Every HTTP answer (WebUI, login, admin, API, static files) carries the policy of
:data:`CONTENT_SECURITY_POLICY`: scripts, styles, fonts and fetches from this origin only, no
inline script or event handler (so an injected ``<script>`` or ``onerror=`` never runs), no
plugins, no framing, ``<base>`` and form targets kept on this origin. Images may also be
``data:`` and ``blob:`` URLs (the WebUI shows a picture it is sending from its bytes; Swagger UI
draws its icons so). Styles allow inline ``style`` attributes and ``<style>`` elements: the
admin's change list and Swagger UI write some; scripts never get that.

``connect-src 'self'`` covers ``ws:``/``wss:`` to the same host in CSP Level 3 browsers; older
ones (Safari before 15.4) need the WebSocket origin named, so :class:`PicoBotCSPMiddleware`
adds ``ws://HOST`` and ``wss://HOST`` of the request's own (``ALLOWED_HOSTS``-checked) host.

The other headers come from Django's ``SecurityMiddleware`` and ``XFrameOptionsMiddleware``
(``settings.py``): ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin``,
``Cross-Origin-Opener-Policy: same-origin``, ``X-Frame-Options: DENY``, and
``Strict-Transport-Security`` on HTTPS requests when ``PICOBOT_HSTS_SECONDS`` is set.
"""

from __future__ import annotations

from typing import Any

from csp.constants import NONE, SELF, UNSAFE_INLINE
from csp.middleware import CSPMiddleware, PolicyParts
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponseBase

RAW_ANSWER_HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
)
"""The headers of an answer the server writes itself, outside Django (``serve``'s 413 for a body
refused before it is read): the same rules, with the strictest policy, as it is a JSON error."""

CONTENT_SECURITY_POLICY: dict[str, Any] = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:", "blob:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}


def websocket_sources(request: HttpRequest) -> list[str]:
    """``["ws://HOST", "wss://HOST"]`` for the request's host (with its port), or ``[]`` when
    the host is not an allowed one (Django answers such a request 400 anyway)."""
    try:
        host = request.get_host()
    except DisallowedHost:
        return []
    return [f"ws://{host}", f"wss://{host}"]


class PicoBotCSPMiddleware(CSPMiddleware):
    """django-csp's middleware, with the request's own WebSocket origin added to ``connect-src``."""

    def get_policy_parts(
        self, request: HttpRequest, response: HttpResponseBase, report_only: bool = False
    ) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        sources = websocket_sources(request)
        if sources and not report_only and parts.replace is None:
            parts.update = {**(parts.update or {}), "connect-src": sources}
        return parts
