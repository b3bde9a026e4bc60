"""``POST /feishu/events/``: the Feishu event subscription's request URL (FEISHU.md §4).

Thin glue: the raw body and headers go to ``envelope.open_envelope`` (decrypt, signature and
token checks, size and shape limits); a URL verification is answered with its challenge at once;
a verified event goes to the receiver, which records it and returns within the platform's 3 s.
Anything invalid is answered 400/401/413 with nothing processed; an event type PicoBot does not
handle is answered 200, so the platform does not retry it. 500 only when the message could not be
recorded (503 for a group message while the bot's own open_id is unknown) — the platform then
delivers it again.
"""

from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from conversations.feishu.envelope import MAX_BODY_BYTES, EnvelopeRejected, UrlVerification, open_envelope
from conversations.feishu.platform import current
from conversations.feishu.receive import BotUnknownError

log = logging.getLogger(__name__)


@csrf_exempt
@require_POST
async def feishu_events(request: HttpRequest) -> HttpResponse:
    """Answers one event delivery; see the module docstring."""
    platform = current()
    if platform is None or platform.config.mode != "webhook":
        return JsonResponse({"error": "Feishu webhook mode is not enabled"}, status=404)
    headers = {name.lower(): value for name, value in request.headers.items()}
    try:
        declared = int(headers.get("content-length") or 0)
    except ValueError:
        declared = 0
    try:
        if declared > MAX_BODY_BYTES:  # refused before reading (Django's own limit answers HTML)
            raise EnvelopeRejected(413, f"body over {MAX_BODY_BYTES} bytes")
        try:
            body = request.body
        except RequestDataTooBig:
            raise EnvelopeRejected(413, f"body over {MAX_BODY_BYTES} bytes") from None
        envelope = open_envelope(
            body,
            headers,
            verification_token=platform.config.verification_token,
            encrypt_key=platform.config.encrypt_key or None,
        )
    except EnvelopeRejected as exc:
        log.warning("feishu webhook request refused (%d): %s", exc.status, exc.reason)
        return JsonResponse({"error": exc.reason}, status=exc.status)
    if isinstance(envelope, UrlVerification):
        return JsonResponse({"challenge": envelope.challenge})
    try:
        await platform.receiver.receive(envelope.event)
    except DatabaseError:
        log.exception("feishu event not recorded; the platform will deliver it again")
        return JsonResponse({"error": "not recorded, deliver again"}, status=500)
    except BotUnknownError as exc:
        log.warning("feishu event not recorded: %s; the platform will deliver it again", exc)
        return JsonResponse({"error": "not recorded, deliver again"}, status=503)
    return JsonResponse({"code": 0})
