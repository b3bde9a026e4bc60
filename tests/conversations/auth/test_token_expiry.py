"""API tokens with an expiry, rotation (``createtoken --expires``, ``--rotate``) and the admin's
columns (issue 16 "Authentication hardening")."""

from __future__ import annotations

from io import StringIO

import pytest
from channels.db import database_sync_to_async
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import AsyncClient, Client

from conversations.auth import create_token, get_or_create_user, user_for_token
from conversations.models import ApiToken, now_ms
from tests.conversations.auth.test_auth import first_frame

DAY_MS = 86_400_000


def expire(raw: str) -> None:
    ApiToken.objects.filter(token_hash=ApiToken.hash_token(raw)).update(expires_at=now_ms() - 1)


@pytest.mark.django_db
def test_a_token_works_until_it_expires():
    user, _ = get_or_create_user("olga")
    raw = create_token(user, expires_at=now_ms() + DAY_MS)
    assert user_for_token(raw) == user
    expire(raw)
    assert user_for_token(raw) is None


@pytest.mark.django_db(transaction=True)
async def test_an_expired_token_is_refused_by_rest_and_the_websocket_handshake():
    user, _ = await database_sync_to_async(get_or_create_user)("pia")
    raw = await database_sync_to_async(create_token)(user, expires_at=now_ms() - 1)
    response = await AsyncClient().get("/api/dialogs", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 401
    frame, comm = await first_frame([(b"authorization", f"Bearer {raw}".encode())])
    assert frame["code"] == "unauthorized"
    assert (await comm.receive_output(timeout=5))["code"] == 4401


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", ["bearer", "session"])
async def test_an_open_socket_is_closed_when_its_token_expires(monkeypatch, how):
    monkeypatch.setattr("conversations.auth.websocket.REVOCATION_CHECK_SECONDS", 0.1)
    user, _ = await database_sync_to_async(get_or_create_user)("quin")
    raw = await database_sync_to_async(create_token)(user, expires_at=now_ms() + DAY_MS)
    if how == "bearer":
        headers = [(b"authorization", f"Bearer {raw}".encode())]
    else:
        client = Client()
        ok = await database_sync_to_async(client.post)("/login/", {"username": "quin", "password": raw})
        assert ok.status_code == 302
        cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
        headers = [
            (b"cookie", f"sessionid={cookie}".encode()),
            (b"origin", b"http://localhost:8000"),
            (b"host", b"localhost:8000"),
        ]
    frame, comm = await first_frame(headers)
    assert frame["type"] == "ready"
    await database_sync_to_async(expire)(raw)
    while (output := await comm.receive_output(timeout=5))["type"] != "websocket.close":
        pass
    assert output["code"] == 4401 and "expired" in output["reason"]
    if how == "session":
        page = await database_sync_to_async(client.get)("/")
        assert page.status_code == 302 and page["Location"].startswith("/login/"), "the session ended too"


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("createtoken", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_createtoken_expires_after_the_days_given():
    before = now_ms()
    out, err = run("rosa", "--expires", "1.5")
    token = ApiToken.objects.get(token_hash=ApiToken.hash_token(out.strip()))
    assert before + 1.5 * DAY_MS <= token.expires_at <= now_ms() + 1.5 * DAY_MS
    assert "expires" in err
    out, _ = run("rosa")
    assert ApiToken.objects.get(token_hash=ApiToken.hash_token(out.strip())).expires_at is None


@pytest.mark.django_db
@pytest.mark.parametrize("days", ["0", "-1", "40000", "nan"])
def test_createtoken_refuses_an_expiry_that_is_not_ahead(days):
    with pytest.raises(CommandError):
        run("sven", "--expires", days)
    assert not ApiToken.objects.exists()


@pytest.mark.django_db
def test_createtoken_rotate_revokes_the_old_tokens_and_prints_a_working_one():
    old_laptop = run("tess", "--name", "laptop")[0].strip()
    phone = run("tess", "--name", "phone")[0].strip()
    out, err = run("tess", "--name", "laptop", "--rotate")
    new = out.strip()
    assert user_for_token(old_laptop) is None and "Revoked" in err
    assert user_for_token(phone) is not None, "--name rotates only the tokens of that name"
    assert user_for_token(new).username == "tess"
    out, _ = run("tess", "--rotate")
    assert user_for_token(phone) is None and user_for_token(new) is None
    assert user_for_token(out.strip()) is not None
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 1


@pytest.mark.django_db
def test_the_admin_lists_last_use_and_expiry(client):
    admin = get_user_model().objects.create_superuser("root", password="a-long-password-1")
    user, _ = get_or_create_user("ugo")
    raw = create_token(user, expires_at=1_900_000_000_000)
    user_for_token(raw)  # stamps last_used_at
    client.force_login(admin)
    page = client.get("/admin/conversations/apitoken/").content.decode()
    assert "last used" in page.lower() and "expires" in page.lower()
    assert "2030-03-17" in page, "the expiry date"
    assert page.count(" UTC") >= 3, "created, last used and expires are all shown"


@pytest.mark.django_db
def test_the_admin_shows_and_filters_tokens_by_state_live_expired_revoked(client):
    """Expired tokens are not listed as usable (the issue 16 trial found them under "Usable")."""
    admin = get_user_model().objects.create_superuser("root", password="a-long-password-1")
    user, _ = get_or_create_user("vic")
    create_token(user, name="fresh")
    create_token(user, name="old", expires_at=now_ms() - 1000)
    gone = create_token(user, name="gone")
    ApiToken.objects.filter(name="gone").update(revoked_at=now_ms())
    assert user_for_token(gone) is None
    client.force_login(admin)
    listed = {}
    for state in ("live", "expired", "revoked"):
        page = client.get(f"/admin/conversations/apitoken/?state={state}").content.decode()
        listed[state] = {name for name in ("fresh", "old", "gone") if f">{name}<" in page}
    assert listed == {"live": {"fresh"}, "expired": {"old"}, "revoked": {"gone"}}
    page = client.get("/admin/conversations/apitoken/").content.decode()
    for state in ("live", "expired", "revoked"):
        assert f'<td class="field-state">{state}</td>' in page
