"""The autouse fixtures of the tests that run turns: fast worker loops and an empty runtime session
cache.

Not a conftest.py, so that they apply exactly where they are imported: the conftest.py of agent/,
auth/, chat/, context/, runtime/, storage/, titles/, tools/ and api/ imports both. The operator
tools' tests (admin/, management/, transfer/) run with the production timers, as they always did.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def fast_picobot(settings: object) -> None:
    """Short scan/renew intervals and retry delays so tests never wait on production timers."""
    settings.PICOBOT = settings.PICOBOT.replace(
        inbox_scan_seconds=0.2,
        lease_renew_seconds=0.5,
        ws_snapshot_interval_ms=1,
        storage_retry_delays_ms=[10, 20, 30],
    )


@pytest.fixture(autouse=True)
def fresh_runtime_sessions() -> None:
    """Each test starts with an empty process-wide runtime session cache (seed 004 §5)."""
    from conversations.runtime.sessions import reset_session_manager

    reset_session_manager()
