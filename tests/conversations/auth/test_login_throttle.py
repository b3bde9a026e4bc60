"""Login throttling with django-axes on the WebUI login, the admin login and the token-as-password
backend (issue 16, Must show 2; README "Authentication")."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.test import Client
from django.utils import timezone

from conversations.auth import create_token, get_or_create_user
from conversations.auth.backends import ApiTokenBackend

pytestmark = [pytest.mark.django_db]

PASSWORD = "the-right-password-1"


@pytest.fixture
def backend_calls(monkeypatch) -> list[str]:
    """The names of the password/token backends consulted: each call hashes a password or looks
    a token up, the work a locked-out login must not cost."""
    calls: list[str] = []
    for cls in (ModelBackend, ApiTokenBackend):
        original = cls.authenticate

        def counted(self, *args, _original=original, _name=cls.__name__, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "authenticate", counted)
    return calls


def make_user(username: str) -> None:
    get_user_model().objects.create_user(username, password=PASSWORD)


def login(client: Client, username: str, password: str, path: str = "/login/", **extra):
    return client.post(path, {"username": username, "password": password}, **extra)


def test_the_sixth_wrong_password_is_refused_without_checking_any_password(backend_calls):
    make_user("anna")
    client = Client()
    for _ in range(4):
        response = login(client, "anna", "wrong-guess")
        assert response.status_code == 200 and b"login-error" in response.content
    fifth = login(client, "anna", "wrong-guess")
    assert fifth.status_code == 429, "the fifth wrong password locks the account and says so"
    consulted = len(backend_calls)
    sixth = login(client, "anna", "wrong-guess")
    assert sixth.status_code == 429
    assert sixth["Retry-After"] == "60"
    assert b"Try again in 60 seconds" in sixth.content
    assert len(backend_calls) == consulted, "no password was hashed for the locked-out try"
    right = login(client, "anna", PASSWORD)
    assert right.status_code == 429, "while locked even the right password is refused"
    assert len(backend_calls) == consulted


def test_the_right_password_of_another_account_from_the_same_address_works_at_once():
    make_user("bert")
    make_user("cleo")
    client = Client()
    for _ in range(6):
        login(client, "bert", "wrong-guess")
    assert login(client, "bert", "wrong-guess").status_code == 429
    response = login(Client(), "cleo", PASSWORD)
    assert response.status_code == 302 and response["Location"] == "/"


def test_a_successful_login_resets_the_count():
    make_user("dora")
    for _ in range(4):
        login(Client(), "dora", "wrong-guess")
    assert login(Client(), "dora", PASSWORD).status_code == 302
    for _ in range(4):
        assert login(Client(), "dora", "wrong-guess").status_code == 200, "counting starts again"


def test_the_lock_ends_after_the_lockout_time():
    make_user("emil")
    for _ in range(5):
        login(Client(), "emil", "wrong-guess")
    assert login(Client(), "emil", PASSWORD).status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(seconds=61))
    assert login(Client(), "emil", PASSWORD).status_code == 302


def test_the_admin_login_is_throttled_too(backend_calls):
    get_user_model().objects.create_superuser("fiona", password=PASSWORD)
    client = Client()
    for _ in range(5):
        login(client, "fiona", "wrong-guess", path="/admin/login/")
    consulted = len(backend_calls)
    response = login(client, "fiona", PASSWORD, path="/admin/login/")
    assert response.status_code == 429 and response["Retry-After"] == "60"
    assert len(backend_calls) == consulted


def test_a_token_as_the_password_is_throttled_like_a_password(backend_calls):
    user, _ = get_or_create_user("gus")
    token = create_token(user)
    client = Client()
    for _ in range(5):
        login(client, "gus", "pb_" + "x" * 43)
    consulted = len(backend_calls)
    assert login(client, "gus", token).status_code == 429
    assert len(backend_calls) == consulted, "no token was looked up while locked"
    AccessAttempt.objects.all().delete()
    assert login(client, "gus", token).status_code == 302


def test_locking_by_account_and_address_leaves_other_addresses_alone(settings):
    settings.AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
    make_user("hugo")
    for _ in range(5):
        login(Client(), "hugo", "wrong-guess", REMOTE_ADDR="10.0.0.1")
    assert login(Client(), "hugo", PASSWORD, REMOTE_ADDR="10.0.0.1").status_code == 429
    assert login(Client(), "hugo", PASSWORD, REMOTE_ADDR="10.0.0.2").status_code == 302


@pytest.mark.django_db(transaction=True)
async def test_the_lockout_page_is_served_on_the_async_path_too():
    """Under ASGI (``serve``) axes' middleware takes its async branch."""
    from asgiref.sync import sync_to_async
    from django.test import AsyncClient

    await sync_to_async(make_user)("ines")
    client = AsyncClient()
    for _ in range(5):
        await client.post("/login/", {"username": "ines", "password": "wrong-guess"})
    response = await client.post("/login/", {"username": "ines", "password": PASSWORD})
    assert response.status_code == 429 and response["Retry-After"] == "60"
    assert b"Try again in 60 seconds" in response.content


def test_one_address_guessing_across_many_accounts_is_refused_before_any_password_is_hashed(
    backend_calls, settings
):
    """Axes locks an account; the per-address limit (PICOBOT_AUTH_FAILURES_PER_ADDRESS) stops an
    address that spreads its guesses so that no account reaches its own lock."""
    settings.PICOBOT = settings.PICOBOT.replace(auth_failures_per_address=6)
    for n in range(4):
        make_user(f"user{n}")
    make_user("bystander")
    guesser = Client(REMOTE_ADDR="203.0.113.9")
    for n in range(6):  # two wrong passwords on each of three accounts: none of them is locked
        assert login(guesser, f"user{n % 3}", "wrong-guess").status_code == 200
    consulted = len(backend_calls)
    refused = login(guesser, "user3", PASSWORD)
    assert refused.status_code == 429, "even a right password: the address is over its limit"
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert b"Try again in" in refused.content
    assert len(backend_calls) == consulted, "no password hashed, no token looked up"
    assert b"from this address" in refused.content and b"for this account" not in refused.content
    assert not AccessAttempt.objects.filter(username="user3").exists(), (
        "never checked: not an account failure"
    )
    other_address = Client(REMOTE_ADDR="198.51.100.7")
    assert login(other_address, "bystander", PASSWORD).status_code == 302, "another address logs in at once"


def test_failed_logins_and_failed_tokens_share_one_per_address_count(settings):
    settings.PICOBOT = settings.PICOBOT.replace(auth_failures_per_address=3)
    make_user("bea")
    client = Client(REMOTE_ADDR="203.0.113.10")
    for _ in range(2):
        assert login(client, "bea", "wrong-guess").status_code == 200
    api = client.get("/api/dialogs", HTTP_AUTHORIZATION="Bearer pb_wrong")
    assert api.status_code == 401
    refused = client.get("/api/dialogs", HTTP_AUTHORIZATION="Bearer pb_wrong")
    assert refused.status_code == 429 and "Retry-After" in refused


def test_tries_refused_for_their_address_never_lock_the_account(settings, monkeypatch):
    """Someone behind a blocked address (an office NAT) who keeps signing in is not locked out of
    their account once the address's window has passed."""
    from conversations.auth import throttle

    class Clock:
        now = 1000.0

    monkeypatch.setattr(throttle, "_clock", lambda: Clock.now)
    settings.PICOBOT = settings.PICOBOT.replace(auth_failures_per_address=2)
    make_user("jack")
    office = Client(REMOTE_ADDR="203.0.113.11")
    for _ in range(2):
        office.get("/api/dialogs", HTTP_AUTHORIZATION="Bearer pb_guess")
    for _ in range(8):  # more than the account's limit, all refused for the address
        assert login(office, "jack", PASSWORD).status_code == 429
    assert not AccessAttempt.objects.filter(username="jack").exists()
    Clock.now += 61
    assert login(office, "jack", PASSWORD).status_code == 302, "the address's wait is over: jack signs in"
