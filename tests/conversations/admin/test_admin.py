"""The Django admin for operators (DESIGN §3, §8 no secrets in list pages, §9 staff only)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages

from conversations.auth import create_token, user_for_token
from conversations.models import ApiToken, Dialog, InboxMessage, MemoryItem
from tests.conversations.dialogs import PNG, make_dialog

pytestmark = [pytest.mark.django_db]

DIALOGS = "/admin/conversations/dialog/"
MESSAGES = "/admin/conversations/message/"
TOKENS = "/admin/conversations/apitoken/"


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice", password="pw-for-tests")


def listed(response) -> list:
    assert response.status_code == 200
    return [row.pk for row in response.context["cl"].result_list]


# --- staff only --------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/admin/", DIALOGS, MESSAGES, TOKENS, "/admin/conversations/inboxmessage/"])
def test_anonymous_and_non_staff_users_cannot_open_the_admin(client, alice, url):
    assert client.get(url).status_code == 302
    client.force_login(alice)  # a normal chat user, not staff
    response = client.get(url)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    # Logging in there as a non-staff user is refused too.
    client.logout()
    response = client.post("/admin/login/", {"username": "alice", "password": "pw-for-tests", "next": url})
    assert response.status_code == 200 and "staff account" in response.content.decode()


# --- dialogs -----------------------------------------------------------------------------------


def test_dialog_list_shows_row_columns_and_hides_history_secrets(staff_client, alice):
    dialog = make_dialog(alice)
    response = staff_client.get(DIALOGS)
    assert listed(response) == [dialog.pk]
    page = response.content.decode()
    assert dialog.title in page and dialog.pk in page
    assert "2023-11-14" in page  # last_active_at as a readable date
    assert PNG not in page and "api.example/v1" not in page


def test_dialog_search_covers_title_id_and_message_content(staff_client, alice):
    weather = make_dialog(alice, title="Weather and time")
    other = make_dialog(alice, title="Shopping list", dialog_id="cafe0001")
    other.messages.update(content="buy oat milk and bread")
    assert listed(staff_client.get(DIALOGS, {"q": "weather"})) == [weather.pk]
    assert listed(staff_client.get(DIALOGS, {"q": "cafe0001"})) == [other.pk]
    assert listed(staff_client.get(DIALOGS, {"q": "oat milk"})) == [other.pk]
    assert set(listed(staff_client.get(DIALOGS, {"q": "Paris"}))) == {weather.pk}


def test_dialog_filters_channel_active_deleted_and_last_active(staff_client, alice):
    active = make_dialog(alice, active=True, last_active_at=2_000_000_000_000)
    old = make_dialog(alice, last_active_at=1_000_000_000_000)
    gone = make_dialog(alice, deleted_at=1_700_000_000_000)
    feishu = make_dialog(None, channel="feishu", chat_id="oc_1")
    assert listed(staff_client.get(DIALOGS, {"channel": "feishu"})) == [feishu.pk]
    assert listed(staff_client.get(DIALOGS, {"active": "yes"})) == [active.pk]
    assert set(listed(staff_client.get(DIALOGS, {"active": "no"}))) == {old.pk, gone.pk, feishu.pk}
    assert listed(staff_client.get(DIALOGS, {"deleted": "yes"})) == [gone.pk]
    assert gone.pk not in listed(staff_client.get(DIALOGS, {"deleted": "no"}))
    assert old.pk in listed(staff_client.get(DIALOGS, {"last_active_at": "-365"}))
    assert old.pk not in listed(staff_client.get(DIALOGS, {"last_active_at": "30"}))


def test_dialog_page_shows_history_in_seq_order_with_roles_tools_reasoning_and_status(staff_client, alice):
    dialog = make_dialog(alice, turns=2)
    response = staff_client.get(f"{DIALOGS}{dialog.pk}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    formset = response.context["inline_admin_formsets"][0].formset
    assert [m.seq for m in formset.get_queryset()] == list(range(1, 11))
    for text in (
        "current_time(",
        "http_fetch({url: nope)",
        "The user wants the time",
        "tool http_fetch (error)",
        "Cancelled",
        "seq 1–10 of 10",
    ):
        assert text in page, text
    assert PNG not in page and "api.example/v1" not in page  # no media data, no provider state


def test_a_long_history_is_shown_in_windows_of_200_rows(staff_client, alice):
    dialog = make_dialog(alice, turns=45)  # 225 rows
    first = staff_client.get(f"{DIALOGS}{dialog.pk}/change/")
    rows = first.context["inline_admin_formsets"][0].formset.get_queryset()
    assert [m.seq for m in rows] == list(range(1, 201))
    assert "?history_from=201" in first.content.decode()
    second = staff_client.get(f"{DIALOGS}{dialog.pk}/change/", {"history_from": "201"})
    assert [m.seq for m in second.context["inline_admin_formsets"][0].formset.get_queryset()] == list(
        range(201, 226)
    )
    assert "seq 201–225 of 225" in second.content.decode()


def change_form_data(response, **changes) -> dict:
    """The POST data of a rendered admin change form (hidden inputs and the title), with changes."""
    page = response.content.decode()
    data = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page))
    data.update({"title": response.context["adminform"].form.initial["title"], "_save": "Save"}, **changes)
    return data


def test_editing_the_title_is_a_user_rename_and_keeps_counters_written_meanwhile(staff_client, alice):
    dialog = make_dialog(alice, title_is_default=True, turns=45)  # the inline shows a window
    url = f"{DIALOGS}{dialog.pk}/change/"
    form = staff_client.get(url)
    # A turn commits while the operator edits: its counters must survive the save.
    Dialog.objects.filter(pk=dialog.pk).update(
        message_count=46, history_revision=230, total_message_count=230
    )
    response = staff_client.post(url, change_form_data(form, title="  Trip   planning "))
    assert response.status_code == 302, response.content.decode()[:2000]
    row = Dialog.objects.get(pk=dialog.pk)
    assert (row.title, row.title_is_default) == ("Trip planning", False)
    assert row.state_version == dialog.state_version + 1
    assert (row.message_count, row.history_revision, row.total_message_count) == (46, 230, 230)


@pytest.mark.parametrize("title", ["   ", "bad\x07title"])
def test_a_bad_title_is_refused_in_the_form(staff_client, alice, title):
    dialog = make_dialog(alice)
    form = staff_client.get(f"{DIALOGS}{dialog.pk}/change/")
    response = staff_client.post(f"{DIALOGS}{dialog.pk}/change/", change_form_data(form, title=title))
    assert response.status_code == 200 and response.context["adminform"].form.errors
    assert Dialog.objects.get(pk=dialog.pk).title == dialog.title


def test_a_deleted_dialog_cannot_be_renamed(staff_client, alice):
    dialog = make_dialog(alice, deleted_at=1_700_000_000_000)
    form = staff_client.get(f"{DIALOGS}{dialog.pk}/change/")
    response = staff_client.post(f"{DIALOGS}{dialog.pk}/change/", change_form_data(form, title="New name"))
    assert "A deleted dialog cannot be renamed." in response.content.decode()


def test_dialogs_cannot_be_added_or_deleted_in_the_admin(staff_client, alice):
    dialog = make_dialog(alice)
    assert staff_client.get(f"{DIALOGS}add/").status_code == 403
    assert staff_client.get(f"{DIALOGS}{dialog.pk}/delete/").status_code == 403


# --- messages, inbox, memory, plans -------------------------------------------------------------


def test_message_list_is_read_only_searchable_and_filterable_by_dialog(staff_client, alice):
    one = make_dialog(alice)
    two = make_dialog(alice, title="Other")
    response = staff_client.get(MESSAGES, {"dialog__id__exact": one.pk})
    assert len(listed(response)) == 5
    page = response.content.decode()
    assert "It is noon in Paris." in page and PNG not in page and "api.example/v1" not in page
    found = listed(staff_client.get(MESSAGES, {"q": "noon in Paris"}))
    assert len(found) == 2
    assert len(listed(staff_client.get(MESSAGES, {"q": two.pk}))) == 5
    assert staff_client.get(f"{MESSAGES}add/").status_code == 403
    row = one.messages.get(seq=2)
    detail = staff_client.get(f"{MESSAGES}{row.pk}/change/")
    assert detail.status_code == 200 and "api.example/v1" in detail.content.decode()  # detail only
    assert 'name="content"' not in detail.content.decode()  # view only
    user_row = one.messages.get(seq=1)
    assert PNG not in staff_client.get(f"{MESSAGES}{user_row.pk}/change/").content.decode()


def test_inbox_memory_and_plan_pages_open(staff_client, alice):
    dialog = make_dialog(alice)
    InboxMessage.objects.create(
        dialog=dialog,
        position=1,
        content="queued hello",
        user=alice,
        media=[{"mime_type": "image/png", "data": PNG}],
    )
    MemoryItem.objects.create(owner=alice, content="Alice prefers metric units", tags=["prefs"])
    inbox = staff_client.get("/admin/conversations/inboxmessage/")
    assert "queued hello" in inbox.content.decode() and PNG not in inbox.content.decode()
    assert (
        "Alice prefers metric units" in staff_client.get("/admin/conversations/memoryitem/").content.decode()
    )
    assert "check time" in staff_client.get("/admin/conversations/plan/").content.decode()


# --- API tokens ----------------------------------------------------------------------------------


def test_a_token_created_in_the_admin_is_shown_once_and_never_again(staff_client, alice):
    response = staff_client.post(f"{TOKENS}add/", {"user": alice.pk, "name": "laptop"})
    assert response.status_code == 200
    page = response.content.decode()
    raw = re.search(r'id="new-api-token"[^>]*>(pb_[^<]+)<', page).group(1)
    token = ApiToken.objects.get()
    assert (
        token.token_hash == ApiToken.hash_token(raw)
        and raw.startswith(token.prefix)
        and token.name == "laptop"
    )
    assert user_for_token(raw) == alice
    assert not list(get_messages(response.wsgi_request))  # not parked in the session or a cookie
    for later in (TOKENS, f"{TOKENS}{token.pk}/change/", "/admin/"):
        text = staff_client.get(later).content.decode()
        assert raw not in text and token.token_hash not in text, later
    assert f"{token.prefix}…" in staff_client.get(TOKENS).content.decode()


def test_the_token_list_shows_prefix_user_dates_and_the_revoke_action_works(staff_client, alice):
    raw = create_token(alice, name="script")
    other = create_token(alice, name="tui")
    token = ApiToken.objects.get(name="script")
    page = staff_client.get(TOKENS).content.decode()
    assert token.prefix in page and "script" in page and "alice" in page
    assert token.token_hash not in page and raw not in page
    response = staff_client.post(
        TOKENS, {"action": "revoke", "_selected_action": [token.pk], "index": 0}, follow=True
    )
    assert "1 token(s) revoked." in response.content.decode()
    assert user_for_token(raw) is None and user_for_token(other) == alice


def test_a_rename_in_the_admin_is_announced_to_the_chats_clients(staff_client, alice, monkeypatch):
    published = []

    async def publish_frame(channel, chat_id, frame, **_):
        published.append((channel, chat_id, frame))

    monkeypatch.setattr("conversations.admin.dialogs.notify.publish_frame", publish_frame)
    dialog = make_dialog(alice, active=True)
    url = f"{DIALOGS}{dialog.pk}/change/"
    response = staff_client.post(url, change_form_data(staff_client.get(url), title="From the admin"))
    assert response.status_code == 302
    assert published == [
        (
            "cli_chat",
            str(alice.pk),
            {
                "type": "session_changed",
                "session_id": dialog.pk,
                "dialog_id": dialog.dialog_id,
                "title": "From the admin",
                "active": True,
            },
        )
    ]


PLANS = "/admin/conversations/plan/"


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ('"abc"', "a plan is an object"),
        ('{"steps": 5}', "is not of type"),
        ('{"steps": [{"text": "a", "status": "later"}]}', "later"),
        ('{"steps": [{"text": "a", "done": true}]}', "'status' is a required property"),
        ('{"steps": [{"text": "a", "status": "done"}], "note": 5}', "is not of type"),
        ('{"steps": [' + ", ".join(['{"text": "a", "status": "done"}'] * 21) + "]}", "maxItems"),
    ],
)
def test_a_plan_the_plan_tool_could_not_write_is_refused(staff_client, alice, content, error):
    dialog = make_dialog(alice)
    plan = dialog.plan
    response = staff_client.post(
        f"{PLANS}{plan.pk}/change/", {"dialog": dialog.pk, "content": content, "_save": "Save"}
    )
    assert response.status_code == 200, "the form is shown again with the error"
    errors = response.context["adminform"].form.errors["content"]
    assert error in " ".join(errors)
    plan.refresh_from_db()
    assert plan.content == {"steps": [{"text": "check time", "status": "done"}], "note": ""}


def test_a_valid_plan_is_saved_as_the_plan_tool_stores_it(staff_client, alice):
    dialog = make_dialog(alice)
    content = '{"steps": [{"text": "  pack   bags ", "status": "in_progress"}]}'
    response = staff_client.post(
        f"{PLANS}{dialog.plan.pk}/change/", {"dialog": dialog.pk, "content": content, "_save": "Save"}
    )
    assert response.status_code == 302
    dialog.plan.refresh_from_db()
    assert dialog.plan.content == {"steps": [{"text": "pack bags", "status": "in_progress"}], "note": ""}


def test_a_user_with_dialogs_can_be_deleted_after_purge_user(staff_client, alice):
    """The admin cannot delete history rows, so it refuses to delete a user who owns dialogs;
    ``purge --user`` removes them first (README)."""
    from io import StringIO

    from django.core.management import call_command

    make_dialog(alice)
    make_dialog(alice, deleted_at=1_700_000_000_000)
    url = f"/admin/auth/user/{alice.pk}/delete/"
    refused = staff_client.post(url, {"post": "yes"})
    assert refused.status_code == 403 or "permission" in refused.content.decode().lower()
    assert get_user_model().objects.filter(pk=alice.pk).exists()

    dry = StringIO()
    call_command("purge", "--user", "alice", stdout=dry, stderr=StringIO())
    assert "Would purge 2 dialog(s)" in dry.getvalue() and Dialog.objects.count() == 2
    call_command("purge", "--user", "alice", "--apply", stdout=StringIO(), stderr=StringIO())
    assert not Dialog.objects.exists()
    response = staff_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not get_user_model().objects.filter(pk=alice.pk).exists()
