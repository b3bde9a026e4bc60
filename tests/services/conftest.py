"""Service tests run against real PostgreSQL/Redis when ``PICOBOT_TEST_*_URL`` are set (DESIGN §10).

Without them they skip with the reason; with ``PICOBOT_REQUIRE_SERVICES=1`` (CI) a missing
service fails instead of skipping.
"""

from __future__ import annotations

import os

import pytest


def require_service(variable: str) -> str:
    """The URL in ``$variable``; skip (or fail under PICOBOT_REQUIRE_SERVICES=1) when unset."""
    url = os.environ.get(variable, "").strip()
    if url:
        return url
    message = f"{variable} is not set; this test needs the real service"
    if os.environ.get("PICOBOT_REQUIRE_SERVICES") == "1":
        pytest.fail(message + " (PICOBOT_REQUIRE_SERVICES=1)")
    pytest.skip(message)
