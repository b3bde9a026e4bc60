"""``GET /metrics``: the Prometheus scrape, for a bearer of ``PICOBOT_METRICS_TOKEN`` (issue 17).

Unset token: 404 (metrics are off). A missing or wrong ``Authorization: Bearer`` header: 401 with
``WWW-Authenticate: Bearer``; the token is compared in constant time. No session, login or CSRF
is involved, so a scraper needs nothing but the header. The scrape runs one ``COUNT … GROUP BY``
on the inbox (an indexed column).
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from conversations.models import InboxMessage
from picobot_site.metrics.exposition import CONTENT_TYPE, INBOX_STATUSES, render


def inbox_counts() -> dict[str, int]:
    """Inbox rows by status (queued, started): one query."""
    rows = (
        InboxMessage.objects.filter(status__in=INBOX_STATUSES)
        .values("status")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {row["status"]: row["n"] for row in rows}


def _authorized(request: HttpRequest, token: str) -> bool:
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(credentials.strip().encode(), token.encode())


@csrf_exempt
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.PICOBOT.metrics_token.get_secret_value()
    if not token:
        return HttpResponseNotFound(
            "metrics are off (PICOBOT_METRICS_TOKEN is not set)\n", content_type="text/plain"
        )
    if not _authorized(request, token):
        response = HttpResponse("a valid bearer token is required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    response = HttpResponse(render(inbox_counts), content_type=CONTENT_TYPE)
    response["Cache-Control"] = "no-store"
    return response
