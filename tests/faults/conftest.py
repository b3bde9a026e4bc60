"""The gateway's autouse fixtures (fast worker loops, an empty runtime session cache), plus a short
convergence delay so a dropped final is looked up in storage within the scenario."""

from __future__ import annotations

import pytest

from tests.conversations.conftest import connect, start_worker  # noqa: F401 - fixtures used here
from tests.conversations.gateway_fixtures import fast_picobot, fresh_runtime_sessions  # noqa: F401 - autouse here


@pytest.fixture(autouse=True)
def quick_convergence(request: pytest.FixtureRequest, settings: object) -> None:
    request.getfixturevalue("fast_picobot")  # first: this adds to its settings
    settings.PICOBOT = settings.PICOBOT.replace(reconcile_quiet_seconds=0.5)
