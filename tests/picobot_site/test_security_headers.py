"""Every answer carries the security headers of issue 16 (``picobot_site/headers.py``): the WebUI,
the login page, the admin, the API (answers, errors, the docs page) and static files."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from conversations.auth import create_token, get_or_create_user

pytestmark = [pytest.mark.django_db]

HOST = "127.0.0.1:8123"


def directives(response) -> dict[str, list[str]]:
    """The Content-Security-Policy header as {directive: [sources]}."""
    policy = response["Content-Security-Policy"]
    parsed = {}
    for part in policy.split(";"):
        name, *sources = part.split()
        parsed[name] = sources
    return parsed


def assert_secured(response) -> None:
    csp = directives(response)
    assert csp["script-src"] == ["'self'"]  # no 'unsafe-inline', no nonce, no foreign origin
    assert "script-src-attr" not in csp and "script-src-elem" not in csp
    assert csp["default-src"] == ["'self'"]
    assert csp["object-src"] == ["'none'"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert csp["base-uri"] == ["'self'"]
    assert csp["form-action"] == ["'self'"]
    assert csp["connect-src"] == ["'self'", f"ws://{HOST}", f"wss://{HOST}"]
    for sources in csp.values():
        assert all(s.startswith("'") or s in ("data:", "blob:") or HOST in s for s in sources), sources
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Frame-Options"] == "DENY"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert "Strict-Transport-Security" not in response  # PICOBOT_HSTS_SECONDS is 0 by default


@pytest.fixture
def client() -> Client:
    return Client(HTTP_HOST=HOST)


@pytest.fixture
def alice(client: Client):
    user, _ = get_or_create_user("alice")
    client.force_login(user)
    return user


@override_settings(ALLOWED_HOSTS=["127.0.0.1"])
@pytest.mark.parametrize(
    "url, status",
    [
        ("/login/", 200),
        ("/", 302),  # to the login page
        ("/admin/login/", 200),
        ("/api/health", 200),
        ("/api/dialogs", 401),
        ("/api/no-such-path", 404),
        ("/api/docs", 200),
        ("/api/openapi.json", 200),
        ("/static/picobot/app.js", 200),
        ("/no-such-page/", 404),
    ],
)
def test_anonymous_answers_carry_the_security_headers(client, url, status):
    response = client.get(url)
    assert response.status_code == status
    assert_secured(response)


@override_settings(ALLOWED_HOSTS=["127.0.0.1"])
def test_the_webui_page_of_a_logged_in_user_carries_the_security_headers(client, alice):
    response = client.get("/")
    assert response.status_code == 200
    assert_secured(response)


@override_settings(ALLOWED_HOSTS=["127.0.0.1"])
def test_the_admin_of_a_staff_user_carries_the_security_headers(client, alice):
    alice.is_staff = alice.is_superuser = True
    alice.save()
    for url in ("/admin/", "/admin/conversations/dialog/", "/admin/conversations/apitoken/add/"):
        response = client.get(url)
        assert response.status_code == 200, url
        assert_secured(response)


@pytest.mark.django_db(transaction=True)  # the API reads through the storage threads
@override_settings(ALLOWED_HOSTS=["127.0.0.1"])
def test_the_api_with_a_token_carries_the_security_headers(client):
    user, _ = get_or_create_user("bob")
    headers = {"Authorization": f"Bearer {create_token(user)}"}
    for response in (
        client.get("/api/dialogs", headers=headers),
        client.post("/api/dialogs", data="{", content_type="application/json", headers=headers),
    ):
        assert response.status_code in (200, 400), response.content
        assert_secured(response)


def test_the_webui_templates_hold_no_inline_script_or_event_handler():
    """What the policy would block must not be in our own pages (they would break)."""
    import re
    from pathlib import Path

    for template in Path("templates").rglob("*.html"):
        text = template.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), template
        assert not re.search(r"\son[a-z]+\s*=", text, re.I), template
        assert "javascript:" not in text.lower(), template


@override_settings(ALLOWED_HOSTS=["chat.example.com"], SECURE_HSTS_SECONDS=31536000)
def test_hsts_is_sent_on_https_requests_when_configured():
    client = Client(HTTP_HOST="chat.example.com")
    assert client.get("/login/", secure=True)["Strict-Transport-Security"] == "max-age=31536000"
    assert "Strict-Transport-Security" not in client.get("/login/")  # never over plain HTTP


@override_settings(ALLOWED_HOSTS=["127.0.0.1"])
def test_a_request_for_another_host_names_no_websocket_origin():
    response = Client(HTTP_HOST="evil.example").get("/login/")
    assert response.status_code == 400
    assert "evil" not in response.get("Content-Security-Policy", "")
