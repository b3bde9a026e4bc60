"""Schemathesis stateful run of the REST API with two users (issue 16, "Fuzzing"; "Must show" 6).

The state machine is built from the live OpenAPI schema (``/api/openapi.json`` through Django's
ASGI handler); schemathesis infers the links between operations from the schema (a dialog's
``session_id`` in one answer feeds the ``{session_id}`` of the next request). Each step is sent
with alice's or bob's API token in turn, so a dialog one of them created or listed is soon asked
for, renamed, written to, stopped or deleted with the other one's token. Checked on every step:
no 5xx and the answer matches the schema (status code, content type, headers, body), the stateful
checks (a deleted dialog stays gone, a created one is there); and across users: a request on the
other user's dialog is refused before anything is read or changed (404, or a validation error
that never reached the dialog) and no answer shows a dialog of the other user. Afterwards every
dialog still belongs to the user who created
it (each scenario then starts from no dialogs). The case count is printed.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ensure_resource_availability,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    use_after_free,
)

from conversations.auth import create_token, get_or_create_user
from conversations.models import Dialog
from picobot_site.asgi import django_asgi_app

pytestmark = [pytest.mark.django_db(transaction=True)]

SCENARIOS = 150
STEPS_PER_SCENARIO = 10
# Answers that come before the dialog is looked up (the body or path is invalid) reveal nothing.
REFUSED_BEFORE_LOOKUP = {400, 405, 413, 415, 422}


class TwoUsers:
    """Whose token each case carries, who owns each dialog seen, and what the run did."""

    def __init__(self, headers: dict[str, dict[str, str]]) -> None:
        self.headers = headers
        self.caller: dict[str, str] = {}  # case id → user name
        self.owner: dict[str, str] = {}  # session_id → user name
        self.cases = 0
        self.cross_user_cases = 0
        self.statuses: dict[int, int] = {}
        self.owners_seen: set[str] = set()
        self.dialogs_seen = 0

    def assert_owners_kept(self) -> None:
        """Every dialog seen is still its creator's (in the database)."""
        for sid, name in self.owner.items():
            dialog = Dialog.objects.filter(id=sid).select_related("owner").first()
            assert dialog is None or dialog.owner.username == name, (sid, name)
        self.owners_seen |= set(self.owner.values())
        self.dialogs_seen += len(self.owner)

    def session_ids_in(self, response: Any) -> set[str]:
        try:
            body = json.loads(response.content or b"null")
        except ValueError:
            return set()
        found: set[str] = set()

        def walk(value: Any) -> None:
            if isinstance(value, dict):
                for key, item in value.items():
                    if key == "session_id" and isinstance(item, str):
                        found.add(item)
                    walk(item)
            elif isinstance(value, list):
                for item in value:
                    walk(item)

        walk(body)
        return found


def make_check(users: TwoUsers) -> Any:
    @schemathesis.check
    def no_cross_user_access(ctx: Any, response: Any, case: schemathesis.Case) -> None:
        """The other user's dialog is refused unread (404); no answer shows one."""
        caller = users.caller[case.id]
        target = unquote(str((case.path_parameters or {}).get("session_id", "")))  # sent URL-encoded
        owner = users.owner.get(target)
        if owner is not None and owner != caller:
            users.cross_user_cases += 1
            status = response.status_code
            assert status == 404 or status in REFUSED_BEFORE_LOOKUP, (
                f"{caller} reached {owner}'s dialog {target}: {case.method} {case.path} → {status} "
                f"{response.content[:300]!r}"
            )
        if 200 <= response.status_code < 300:
            foreign = {
                sid for sid in users.session_ids_in(response) if users.owner.get(sid, caller) != caller
            }
            assert not foreign, (
                f"{caller} was shown another user's dialogs {foreign}: {case.method} {case.path}"
            )

    return no_cross_user_access


def test_two_users_stateful_run_has_no_server_error_and_no_cross_user_access(settings) -> None:
    # Hundreds of sends a minute: the per-user message rate (tests/conversations/auth) is off here.
    settings.PICOBOT = settings.PICOBOT.replace(user_messages_per_minute=0)
    headers = {}
    for name in ("alice", "bob"):
        user, _ = get_or_create_user(name)
        headers[name] = {"Authorization": f"Bearer {create_token(user)}"}
    users = TwoUsers(headers)
    cross_user = make_check(users)
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
        use_after_free,
        ensure_resource_availability,
        cross_user,
    ]
    schema = schemathesis.openapi.from_asgi("/api/openapi.json", django_asgi_app)
    base = schema.as_state_machine()

    class TwoUserMachine(base):  # type: ignore[valid-type, misc]
        """Each scenario starts from no dialogs, so the same draws meet the same state."""

        def setup(self) -> None:
            super().setup()
            self.step_index = 0

        def teardown(self) -> None:
            users.assert_owners_kept()
            Dialog.objects.all().delete()
            users.owner.clear()
            super().teardown()

        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            users.cases += 1
            self.step_index += 1
            # Every third step is the other user: chains of one user's links, then a cross-over.
            name = "bob" if self.step_index % 3 == 0 else "alice"
            users.caller[case.id] = name
            return {"headers": users.headers[name]}

        def after_call(self, response: Any, case: schemathesis.Case) -> None:
            super().after_call(response, case)
            users.statuses[response.status_code] = users.statuses.get(response.status_code, 0) + 1
            if 200 <= response.status_code < 300:
                caller = users.caller[case.id]
                for sid in users.session_ids_in(response):
                    users.owner.setdefault(sid, caller)

        def validate_response(self, response: Any, case: schemathesis.Case, **kwargs: Any) -> None:
            case.validate_response(response, checks=checks, transport_kwargs=kwargs, recorder=self.recorder)

    TwoUserMachine.run(
        settings=hypothesis_settings(
            max_examples=SCENARIOS,
            stateful_step_count=STEPS_PER_SCENARIO,
            derandomize=True,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
    )

    figures = {
        "cases": users.cases,
        "cross_user_cases": users.cross_user_cases,
        "dialogs_seen": users.dialogs_seen,
        "statuses": dict(sorted(users.statuses.items())),
        "failures": 0,
    }
    print(json.dumps(figures))
    assert users.cross_user_cases > 50, figures  # the two users' dialogs did cross
    assert users.owners_seen == {"alice", "bob"}, figures
