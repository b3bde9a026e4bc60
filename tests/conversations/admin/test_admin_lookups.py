"""Hand-made filter parameters on admin list pages get the admin's refusal, never a 500 (a bad
regex, a malformed range or a JSON lookup SQLite lacks must not raise; JSON lookups are refused so
staff cannot probe provider state)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.conversations.dialogs import make_dialog

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def alice():
    user = get_user_model().objects.create_user("alice", password="pw-for-tests")
    make_dialog(user)
    return user


@pytest.mark.parametrize(
    "url",
    [
        "/admin/conversations/dialog/?title__regex=[",
        "/admin/conversations/message/?content__iregex=(",
        "/admin/conversations/memoryitem/?content__regex=(",
        "/admin/conversations/memoryitem/?tags__contains=x",
        "/admin/conversations/message/?tool_calls__contains={}",
        "/admin/conversations/message/?provider_state__has_key=x",
        "/admin/conversations/plan/?content__contains={}",
    ],
)
def test_regex_and_json_lookups_are_refused_with_a_400(staff_client, alice, url):
    assert staff_client.get(url).status_code == 400


@pytest.mark.parametrize(
    "url",
    [
        "/admin/conversations/message/?created_at__range=1",
        "/admin/conversations/dialog/?last_active_at__in=x,y",
    ],
)
def test_a_lookup_that_cannot_run_is_the_admins_incorrect_parameters_answer(staff_client, alice, url):
    response = staff_client.get(url)
    assert response.status_code == 302 and response["Location"].endswith("?e=1")


def test_the_filters_the_admin_offers_still_work(staff_client, alice):
    for url in (
        "/admin/conversations/dialog/?channel__exact=cli_chat",
        "/admin/conversations/message/?q=hello",
        "/admin/delivery/deliveryfailure/",
    ):
        assert staff_client.get(url).status_code == 200, url
