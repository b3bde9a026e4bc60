"""``%00`` in a URL is one clear 400 on every database (never a 500 from
PostgreSQL, which cannot hold NUL in text, nor a "not found" from SQLite)."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db]


@pytest.mark.parametrize(
    "url",
    [
        "/admin/conversations/dialog/x%00y/change/",
        "/admin/conversations/message/?dialog__id__exact=%00",
        "/admin/conversations/dialog/?q=a%00b",
    ],
)
def test_the_admin_refuses_nul_in_the_url_with_a_400(staff_client, url):
    response = staff_client.get(url)
    assert response.status_code == 400
    assert b"NUL character" in response.content


def test_the_api_refuses_nul_in_the_url_with_a_json_400():
    for url in ("/api/dialogs/cli_chat:1:%00", "/api/dialogs?chat_id=%00"):
        response = Client().get(url)
        assert response.status_code == 400, url
        assert response["Content-Type"] == "application/json; charset=utf-8"
        body = response.json()
        assert body["code"] == "bad_request" and "NUL character" in body["message"]


def test_an_ordinary_admin_page_is_unaffected(staff_client):
    assert staff_client.get("/admin/conversations/dialog/?q=plain").status_code == 200
