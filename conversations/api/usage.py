"""``GET /api/usage``: provider usage and cost grouped by dialog, user or day (issue 17).

A user sees the sums of their own usage rows; staff see everyone's. The rows are the usage
writer's (one per provider call: turns, titles, compactions), so these sums are the admin's.
"""

from __future__ import annotations

from datetime import date
from typing import Literal

from django.http import HttpRequest
from ninja import Query, Router

from conversations.api.common import errors
from conversations.api.errors import ApiError
from conversations.api.schemas import UsagePage
from conversations.storage.runner import run_storage
from conversations.usage.sums import grouped_usage, usage_rows
from conversations.usage.writer import usage_writer

router = Router()

# Query parameters of type ``date``: module-level (ruff B008 knows ``str`` defaults, not these).
SINCE = Query(None, description="first UTC day included (YYYY-MM-DD)")
UNTIL = Query(None, description="last UTC day included (YYYY-MM-DD)")


@router.get("/usage", response={200: UsagePage, **errors()}, tags=["usage"])
async def get_usage(
    request: HttpRequest,
    group_by: Literal["dialog", "user", "day"] = Query(..., description="`dialog`, `user` or `day`"),
    since: date | None = SINCE,
    until: date | None = UNTIL,
) -> dict:
    """Usage sums ``{group_by, items: [{key, calls, input_tokens, output_tokens, cached_tokens,
    cost}]}``; ``key`` is the dialog id, the username or the UTC day ``YYYY-MM-DD``. Input tokens
    include cached ones; cost is in the presets' price currency. 422 for an unknown ``group_by``
    or ``since`` after ``until``."""
    if since is not None and until is not None and since > until:
        raise ApiError(422, "validation_error", f"since ({since}) is after until ({until})")
    user = request.auth
    await usage_writer.flush()  # this process's calls so far count
    items = await run_storage(_items, None if user.is_staff else user.pk, group_by, since, until)
    return {"group_by": group_by, "items": items}


def _items(user_id: int | None, group_by: str, since: date | None, until: date | None) -> list[dict]:
    return grouped_usage(usage_rows(user_id=user_id, since=since, until=until), group_by)
