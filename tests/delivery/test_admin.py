"""DeliveryFailure in the Django admin: list, filters (channel, stage, resolved), resolve action."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from delivery.failures import record_delivery_failure
from delivery.models import DeliveryFailure

pytestmark = [pytest.mark.django_db]

URL = "/admin/delivery/deliveryfailure/"


@pytest.fixture
def rows() -> dict[str, DeliveryFailure]:
    def row(channel: str, stage: str, error: str) -> DeliveryFailure:
        return record_delivery_failure(
            channel=channel,
            chat_id="c1",
            dialog_id=f"{channel}:c1:d1",
            turn_id=None,
            stage=stage,
            error=error,
            attempts=3,
        )

    made = {
        "ws_finish": row("cli_chat", "finish", "ConnectionError: layer down"),
        "feishu_open": row("feishu", "open", "could not open the turn sink"),
        "feishu_fallback": row("feishu", "fallback", "finish: x; fallback: y"),
    }
    DeliveryFailure.objects.filter(pk=made["feishu_fallback"].pk).update(resolved_at=1_700_000_000_000)
    return made


@pytest.fixture
def staff_client(client):
    user = get_user_model().objects.create_user("operator", password="pw-for-tests", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="delivery", codename__endswith="deliveryfailure")
    )
    client.force_login(user)
    return client


def listed(response) -> set[int]:
    assert response.status_code == 200
    return {row.pk for row in response.context["cl"].result_list}


def test_the_changelist_shows_every_failure_with_its_stage_and_error(staff_client, rows):
    response = staff_client.get(URL)
    assert listed(response) == {row.pk for row in rows.values()}
    page = response.content.decode()
    assert "ConnectionError: layer down" in page and "could not open the turn sink" in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("channel=feishu", {"feishu_open", "feishu_fallback"}),
        ("stage=finish", {"ws_finish"}),
        ("resolved=no", {"ws_finish", "feishu_open"}),
        ("resolved=yes", {"feishu_fallback"}),
        ("channel=feishu&resolved=no", {"feishu_open"}),
    ],
)
def test_failures_filter_by_channel_stage_and_resolved(staff_client, rows, query, expected):
    assert listed(staff_client.get(f"{URL}?{query}")) == {rows[name].pk for name in expected}


def test_the_resolve_action_marks_unresolved_rows_and_keeps_earlier_resolutions(staff_client, rows):
    selected = [rows["ws_finish"].pk, rows["feishu_fallback"].pk]
    response = staff_client.post(
        URL, {"action": "mark_resolved", "_selected_action": selected, "index": 0}, follow=True
    )
    assert response.status_code == 200
    assert "1 delivery failure(s) marked resolved." in response.content.decode()
    resolved = dict(DeliveryFailure.objects.values_list("pk", "resolved_at"))
    assert resolved[rows["ws_finish"].pk] is not None
    assert resolved[rows["feishu_fallback"].pk] == 1_700_000_000_000
    assert resolved[rows["feishu_open"].pk] is None


def test_the_admin_is_staff_only(client, rows):
    assert client.get(URL).status_code == 302
    get_user_model().objects.create_user("plain", password="pw-for-tests")
    client.force_login(get_user_model().objects.get(username="plain"))
    assert client.get(URL).status_code == 302


def test_record_delivery_failure_refuses_unknown_stages_and_cuts_long_errors():
    with pytest.raises(ValueError):
        record_delivery_failure(
            channel="cli_chat", chat_id="c", dialog_id="d", turn_id=None, stage="typo", error="", attempts=0
        )
    row = record_delivery_failure(
        channel="cli_chat",
        chat_id="c",
        dialog_id="d",
        turn_id="not-a-uuid",
        stage="finish",
        error="x" * 5000,
        attempts=1,
    )
    assert row.turn_id is None and len(row.error) == 2000 and row.created_at > 0
