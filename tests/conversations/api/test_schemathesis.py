"""Schemathesis against the live OpenAPI schema.

The schema is fetched from the running application (``/api/openapi.json`` through Django's ASGI
handler, as Daphne serves it); every operation then gets a bounded number of generated requests
(deterministic: ``derandomize``), authenticated with an API token. Operations on a dialog run each
case twice: with the generated ``session_id`` (an unknown id: the error paths) and with a fresh
dialog of the caller's (the success paths). Every response must be no 5xx, have a documented
status code, content type and headers, and match its documented schema.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from conversations import storage
from conversations.auth import create_token, get_or_create_user
from picobot_site.asgi import django_asgi_app

pytestmark = [pytest.mark.django_db(transaction=True)]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EXAMPLES_PER_OPERATION = 12


def fuzz(operation: schemathesis.APIOperation, headers: dict, fresh_dialog: Callable[[], str]) -> set[int]:
    """Run the bounded, deterministic examples of one operation; returns the statuses seen."""
    seen: set[int] = set()
    on_a_dialog = "{session_id}" in operation.path

    @hypothesis_settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def check(case: schemathesis.Case) -> None:
        seen.add(case.call_and_validate(headers=headers, checks=CHECKS).status_code)
        if on_a_dialog:
            case.path_parameters["session_id"] = fresh_dialog()
            seen.add(case.call_and_validate(headers=headers, checks=CHECKS).status_code)

    check()
    return seen


def test_the_api_conforms_to_its_live_openapi_schema():
    user, _ = get_or_create_user("schemathesis")
    headers = {"Authorization": f"Bearer {create_token(user)}"}
    schema = schemathesis.openapi.from_asgi("/api/openapi.json", django_asgi_app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 23, [op.label for op in operations]
    seen = {
        operation.label: fuzz(
            operation, headers, lambda: storage.create_dialog(user, "cli_chat", str(user.pk)).id
        )
        for operation in operations
    }
    # The generated requests reached the success paths too, not only the errors.
    nothing_runs = {
        "GET /api/dialogs/{session_id}/turn",
        "POST /api/dialogs/{session_id}/stop",
        "POST /api/dialogs/{session_id}/compact",
        "GET /api/dialogs/{session_id}/messages/{message_id}/media/{index}",
        "PATCH /api/schedules/{schedule_id}",
        "DELETE /api/schedules/{schedule_id}",
        "POST /api/dialogs/{session_id}/schedules",
        "POST /api/tasks/{task_id}/stop",
    }  # no worker, offline provider: 404/409; a fresh dialog holds no image, nor schedules: 404;
    # no task exists (test_task_api has the 202s);
    # generated cron text is (almost) never a valid expression: 422 (test_schedules_api has the 201s)
    for label, statuses in seen.items():
        if label not in nothing_runs:
            assert any(200 <= status < 300 for status in statuses), (label, statuses)
