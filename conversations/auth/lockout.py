"""The answer to a login django-axes refused (issue 16 "Authentication hardening"; Django glue).

``lockout_response`` is ``AXES_LOCKOUT_CALLABLE``: HTTP 429 with ``Retry-After`` (seconds) and a
page saying when to try again (``templates/registration/lockout.html``), for the WebUI login and
the admin's alike, and for an address over its sign-in failure limit (``backends``). A try while locked starts the lock again (axes' default), so the wait is the
whole lock, ``PICOBOT_LOGIN_LOCKOUT_SECONDS``.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def lockout_seconds() -> int:
    """Whole seconds a locked login waits (``AXES_COOLOFF_TIME``)."""
    return max(1, math.ceil(settings.AXES_COOLOFF_TIME.total_seconds()))


def lockout_response(request: HttpRequest, *_: Any) -> HttpResponse:
    """429 with ``Retry-After`` and the lockout page (axes passes the original response and the
    credentials too, in an order that differs between its sync and async paths: unused)."""
    # An address over its sign-in limit (backends.AddressThrottleBackend) waits for its own window.
    by_address = getattr(request, "picobot_retry_after", None)
    retry_after = by_address or lockout_seconds()
    login_url = request.path if request.path.startswith("/admin/") else settings.LOGIN_URL
    context = {
        "retry_after": retry_after,
        "by_address": by_address is not None,
        "username": request.POST.get("username", "") if request.method == "POST" else "",
        "login_url": login_url,
    }
    response = render(request, "registration/lockout.html", context, status=429)
    response["Retry-After"] = str(retry_after)
    return response
