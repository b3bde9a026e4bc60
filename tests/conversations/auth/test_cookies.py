"""Session and CSRF cookie flags (issue 16): HttpOnly session, SameSite=Lax, Secure on request."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.django_db
def test_the_login_sets_an_httponly_samesite_lax_session_cookie_not_secure_by_default():
    get_user_model().objects.create_user("cora", password="a-long-password-1")
    client = Client()
    client.get("/login/")
    csrf = client.cookies["csrftoken"]
    assert csrf["samesite"] == "Lax" and not csrf["secure"]
    assert not csrf["httponly"], "the WebUI's script reads it for X-CSRFToken"
    client.post("/login/", {"username": "cora", "password": "a-long-password-1"})
    session = client.cookies["sessionid"]
    assert session["httponly"] and session["samesite"] == "Lax" and not session["secure"]


@pytest.mark.parametrize("secure", ["1", ""])
def test_picobot_secure_cookies_and_trust_forwarded_proto_reach_django(tmp_path, secure):
    env = {
        **os.environ,
        "PICOBOT_DATA_DIR": str(tmp_path),
        "PICOBOT_SECURE_COOKIES": secure,
        "PICOBOT_TRUST_FORWARDED_PROTO": secure,
        "DJANGO_SETTINGS_MODULE": "picobot_site.settings",
    }
    code = (
        "from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, getattr(s, 'SECURE_PROXY_SSL_HEADER', None))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True
    )
    expected = "True True ('HTTP_X_FORWARDED_PROTO', 'https')" if secure else "False False None"
    assert out.stdout.strip() == expected
