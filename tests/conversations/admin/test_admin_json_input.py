"""The admin's editable JSON columns take only what the database can store (a lone surrogate or
NUL escape, NaN or 1e999 in a memory item's tags or a plan is a form error, never a 500 on
PostgreSQL, and a stored lone surrogate must not break the change page on SQLite), and a form
post holding a NUL is one 400 (a raw-id lookup of it must not reach PostgreSQL)."""

from __future__ import annotations

import html

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from conversations.models import MemoryItem, Plan
from tests.conversations.dialogs import make_dialog

pytestmark = [pytest.mark.django_db]

MEMORY = "/admin/conversations/memoryitem/"
PLANS = "/admin/conversations/plan/"


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice", password="pw-for-tests")


def memory_form(alice, tags: str) -> dict:
    return {
        "owner": alice.pk,
        "channel": "cli_chat",
        "chat_id": str(alice.pk),
        "content": "note",
        "tags": tags,
        "_save": "Save",
    }


@pytest.mark.parametrize(
    ("tags", "error"),
    [
        ('["\\ud800"]', "lone surrogate"),
        ('["a\\u0000"]', "NUL character"),
        ("[NaN]", "not standard JSON"),
        ('[{"x": 1e999}]', "not standard JSON"),
        ('{"a": 1, "a": 2}', "not standard JSON"),
    ],
)
def test_memory_tags_the_database_cannot_store_are_a_form_error(staff_client, alice, tags, error):
    response = staff_client.post(f"{MEMORY}add/", memory_form(alice, tags))
    assert response.status_code == 200, "the form is shown again"
    assert error in " ".join(response.context["adminform"].form.errors["tags"])
    assert html.escape(tags) in response.content.decode(), "the text is shown again as typed"
    assert MemoryItem.objects.count() == 0


@pytest.mark.parametrize(
    ("tags", "stored"),
    [("", []), ("  \n ", []), ("[]", []), ('["  Work ", "work", "Café"]', ["work", "café"])],
)
def test_blank_tags_are_no_tags_and_tags_are_kept_as_the_memory_tools_keep_them(
    staff_client, alice, tags, stored
):
    """Blank tags are stored as the memory tools normalise them (never a NOT NULL 500)."""
    assert staff_client.post(f"{MEMORY}add/", memory_form(alice, tags)).status_code == 302
    assert MemoryItem.objects.get().tags == stored


@pytest.mark.parametrize("tags", ["[1, 2]", "5", "[null]", '{"a": 1}', '"tea"'])
def test_tags_the_memory_search_could_not_read_are_a_form_error(staff_client, alice, tags):
    response = staff_client.post(f"{MEMORY}add/", memory_form(alice, tags))
    assert response.status_code == 200
    assert "list of strings" in " ".join(response.context["adminform"].form.errors["tags"])
    assert MemoryItem.objects.count() == 0


def test_good_tags_are_saved_and_a_stored_lone_surrogate_still_shows(staff_client, alice):
    assert staff_client.post(f"{MEMORY}add/", memory_form(alice, '["work", "café"]')).status_code == 302
    item = MemoryItem.objects.get()
    assert item.tags == ["work", "café"]
    if connection.vendor != "sqlite":
        return  # only SQLite could store a lone surrogate before these rules
    MemoryItem.objects.filter(pk=item.pk).update(tags=["\ud800"])
    page = staff_client.get(f"{MEMORY}{item.pk}/change/")
    assert page.status_code == 200
    assert "\ufffd" in page.content.decode()


def test_a_plan_form_shown_again_with_a_lone_surrogate_step_renders(staff_client, alice):
    dialog = make_dialog(alice)
    content = '{"steps": [{"text": "a\\ud800", "status": "pending"}]}'
    response = staff_client.post(
        f"{PLANS}{dialog.plan.pk}/change/",
        {"dialog": "cli_chat:1:missing", "content": content, "_save": "Save"},
    )
    assert response.status_code == 200
    assert "lone surrogate" in " ".join(response.context["adminform"].form.errors["content"])
    assert Plan.objects.get(pk=dialog.plan.pk).content["steps"][0]["text"] == "check time"


def test_a_blank_plan_is_no_plan(staff_client, alice):
    dialog = make_dialog(alice)
    response = staff_client.post(
        f"{PLANS}{dialog.plan.pk}/change/", {"dialog": dialog.pk, "content": "  ", "_save": "Save"}
    )
    assert response.status_code == 302
    assert Plan.objects.get(pk=dialog.plan.pk).content == {}


@pytest.mark.parametrize("name", ["a\x01b", "two\nlines", "\u202eevil"])
def test_an_admin_token_name_is_printable_text_as_createtoken_takes_it(staff_client, alice, name):
    from conversations.models import ApiToken

    response = staff_client.post(
        "/admin/conversations/apitoken/add/", {"user": alice.pk, "name": name, "_save": "Save"}
    )
    assert response.status_code == 200
    assert "printable text" in " ".join(response.context["adminform"].form.errors["name"])
    assert not ApiToken.objects.exists()


def test_a_form_post_with_a_nul_is_one_400(staff_client, alice):
    dialog = make_dialog(alice)
    response = staff_client.post(f"{PLANS}add/", {"dialog": "a\x00b", "content": "{}", "_save": "Save"})
    assert response.status_code == 400 and b"NUL character" in response.content
    response = staff_client.post(
        f"{PLANS}{dialog.plan.pk}/change/",
        {"dialog": dialog.pk, "content": '{"note": "x\x00"}', "_save": "Save"},
    )
    assert response.status_code == 400


@pytest.mark.parametrize("host", ["evil.example", "local host", ""])
def test_a_bad_host_header_under_api_is_a_json_400(host):
    response = Client().get("/api/health", HTTP_HOST=host)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json; charset=utf-8"
    assert response.json()["code"] == "bad_request"
