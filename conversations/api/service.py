"""``/api/health`` and ``/api/ready``: what load balancers probe (no authentication)."""

from __future__ import annotations

import asyncio
import logging

from django.http import HttpRequest
from ninja import Router

from conversations.api import live, queries
from conversations.api.errors import ApiError
from conversations.api.schemas import ErrorOut, HealthOut, ReadyOut
from conversations.storage.runner import run_storage

log = logging.getLogger(__name__)

DB_PING_SECONDS = 3.0

router = Router()


@router.get("/health", auth=None, response={200: HealthOut, 413: ErrorOut}, tags=["service"])
async def health(request: HttpRequest) -> dict:
    """Liveness: the process answers HTTP. No authentication, no dependency checked."""
    return {"status": "ok"}


@router.get("/ready", auth=None, response={200: ReadyOut, 413: ErrorOut, 503: ErrorOut}, tags=["service"])
async def ready(request: HttpRequest) -> dict:
    """Readiness: one database query (on the storage threads) and a channel-layer round trip.

    200 ``{status: "ready", checks: {database: "ok", channel_layer: "ok"}}``; 503 ``not_ready``
    with the same ``checks`` (``unreachable``) when either fails. No authentication (load
    balancers probe it); failures are detailed only in the log.
    """
    checks = {}
    try:
        await asyncio.wait_for(run_storage(queries.database_ping, retry=False), DB_PING_SECONDS)
        checks["database"] = "ok"
    except Exception:
        log.warning("readiness: the database did not answer", exc_info=True)
        checks["database"] = "unreachable"
    try:
        checks["channel_layer"] = "ok" if await live.layer_ping() else "unreachable"
    except Exception:
        log.warning("readiness: the channel layer did not answer", exc_info=True)
        checks["channel_layer"] = "unreachable"
    if any(state != "ok" for state in checks.values()):
        failing = ", ".join(name for name, state in checks.items() if state != "ok")
        raise ApiError(
            503,
            "not_ready",
            f"not ready: {failing} unreachable",
            extra={"checks": checks},
            headers={"Retry-After": "5"},
        )
    return {"status": "ready", "checks": checks}
