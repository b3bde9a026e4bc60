"""``providers.redaction``: credentials out of text, neither over- nor under-reaching (DESIGN §9)."""

from __future__ import annotations

import json

import pytest

from providers.openai_compat import OpenAICompatProvider
from providers.redaction import looks_like_secret, redact
from tests.providers._cases import run_stream
from tests.providers._mock_sse import KEY, _provider, _transport


@pytest.mark.parametrize(
    ("raw", "secret"),
    [
        ("Authorization: Bearer sk-live-0123456789abcdef", "sk-live-0123456789abcdef"),
        ("authorization: Bearer abc.def.ghi-jkl_mno", "abc.def.ghi-jkl_mno"),
        ("curl -H 'Bearer eyJhbGciOiJIUzI1NiJ9.payload' https://api", "eyJhbGciOiJIUzI1NiJ9.payload"),
        ("Incorrect API key provided: sk-proj-AbCdEf0123456789", "AbCdEf0123456789"),
        ("sk-ant-api03-xyzXYZ0123456789 was refused", "xyzXYZ0123456789"),
        (
            "GET https://gen.example/v1/models?key=AIzaSyD-0123456789abcdefghijk&alt=sse",
            "AIzaSyD-0123456789abcdefghijk",
        ),
        ("POST /v1/chat?api_key=plain-key-value-42 failed", "plain-key-value-42"),
        ("GET /stream?alt=sse&token=tok_98765 HTTP/1.1", "tok_98765"),
        ('{"api_key": "hunter2hunter2", "model": "m"}', "hunter2hunter2"),
        ("x-api-key: 0f0f0f0f0f0f0f0f", "0f0f0f0f0f0f0f0f"),
        ("Invalid API key: gsk_abcdefghijklmnop", "gsk_abcdefghijklmnop"),
        ("connect to https://admin:s3cr3t@db.internal:5432/picobot failed", "s3cr3t"),
        ("password=correct-horse in DSN", "correct-horse"),
        # More vendors' key prefixes, AWS, compound names and bare words with a value.
        ("Invalid key gsk_abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnopqrstuvwxyz0123"),
        (
            "Incorrect API key provided: xai-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345.",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345",
        ),
        ("hf_abcdefghijklmnopqrstuvwxyzABCD invalid", "abcdefghijklmnopqrstuvwxyzABCD"),
        ("token ghp_1234567890abcdefghijklmnopqrstuvwxyz12 bad", "1234567890abcdefghijklmnopqrstuvwxyz12"),
        ("gho_16C7e42F292c6912E7710c838347Ae178B4a expired", "16C7e42F292c6912E7710c838347Ae178B4a"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop revoked", "11ABCDEFG0123456789_abcdefghijklmnop"),
        ("Incorrect API key provided: 'fw_3ZabcdefghijklmnopQRSTUV'", "3ZabcdefghijklmnopQRSTUV"),
        ("AKIAIOSFODNN7EXAMPLE is not authorized", "AKIAIOSFODNN7EXAMPLE"),
        (
            "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        ("header X-Api-Key=abcdef123456 rejected", "abcdef123456"),
        ("X-Api-Key: abcdef123456", "abcdef123456"),
        ("Ocp-Apim-Subscription-Key: 0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
        ("key: ZZZ-my-secret-value", "ZZZ-my-secret-value"),
        ("secret: topsecretvalue1", "topsecretvalue1"),
        ('"token": "tok_98765abc"', "tok_98765abc"),
        ("session_token=abc", "abc"),
        ("db-password: hunter2", "hunter2"),
        ("Authorization=Bearer abc", "abc"),
        ("GET /x?auth=Bearer%20abcdefghijkl1234", "abcdefghijkl1234"),
        ("Bearer%20abcdefghijkl1234", "abcdefghijkl1234"),
        ("Bearer\tabcdefghijkl1234", "abcdefghijkl1234"),
        (
            "private_key: -----BEGIN PRIVATE KEY-----MIIEvQIBADANBg\nAAA\n-----END PRIVATE KEY-----",
            "MIIEvQIBADANBg",
        ),
    ],
)
def test_redact_removes_credentials(raw, secret):
    cleaned = redact(raw)
    assert secret not in cleaned
    assert "[redacted]" in cleaned


def test_redact_replaces_known_secrets_verbatim_and_ignores_tiny_ones():
    text = "upstream echoed my-custom-key-xyz back (id abc)"
    assert redact(text, ["my-custom-key-xyz", "abc", ""]) == "upstream echoed [redacted] back (id abc)"


@pytest.mark.parametrize(
    "text",
    [
        "Rate limit reached for requests",
        "Token limit exceeded for this model",
        "The upstream model is temporarily unavailable.",
        "the key: value pair is missing",
        "Basic plan users cannot use this model",
        "Invalid key provided",
        "max_tokens: 4096 is too large",
        "the token: missing",
        "monkey: banana-1",
        "completion_tokens=12 prompt_tokens=40",
        "",
    ],
)
def test_redact_leaves_ordinary_messages_alone(text):
    assert redact(text) == text


def test_redact_is_idempotent():
    once = redact("Authorization: Bearer sk-live-0123456789 and ?key=abc123&x=1")
    assert redact(once) == once


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        ("ollama", False),
        ("EMPTY", False),
        ("short1", False),  # a digit, but fewer than 8 characters
        ("password", False),  # 8 characters, no digit, and a placeholder
        ("abcdefgh", False),  # 8 letters: a word, not a key
        ("sk-no-key-required", False),  # a documented placeholder, whatever its length
        ("abcd1234", True),  # 8 characters with a digit
        ("my-custom-key-xyz", True),  # 12+ characters
        ("django-insecure-0123456789", True),
    ],
)
def test_only_configured_values_that_look_like_secrets_are_redacted_verbatim(value, secret):
    assert looks_like_secret(value) is secret
    assert (redact(f"echo {value} end", [value]) == "echo [redacted] end") is secret


@pytest.mark.parametrize(
    "text",
    [
        "user: please summarise this",
        "The login page is at /login/ and username: admin",
        "Use pass: through mode",
        "Please use the task-key: in the form",
        "mailto://alice@example.com",
        "Basic authentication is required",
        "the cookie: chocolate chip",
        "see the pplx-api-docs page",
        "xoxo-gossip girl",
        "the api key header is missing",
        "api-key header",
    ],
)
def test_prose_after_a_credential_word_is_left_alone(text):
    assert redact(text) == text


@pytest.mark.parametrize(
    ("raw", "leaked"),
    [
        ("redis://:hunter2@host:6379/0", "hunter2"),
        ("header Basic dXNlcjpwYXNzd29yZDEyMw== sent", "dXNlcjpwYXNzd29yZDEyMw"),
        ("Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("api-key abcd1234efgh5678", "abcd1234efgh5678"),
        ("Cookie: session=abcdef123456; theme=dark", "abcdef123456"),
        ("Set-Cookie: sessionid=abcdef1234567; Path=/", "abcdef1234567"),
        ('{"Cookie": "sid=s3cr3t"}', "s3cr3t"),
        ("sk_live_51Habcdefghijklmnop", "51Habcdefghijklmnop"),
        ("sk_test_51Habcdefghijklmnop", "51Habcdefghijklmnop"),
        ("rk_live_51Habcdefghijklmnop", "51Habcdefghijklmnop"),
        ("xoxb-123456789012-abcdefghijk", "123456789012-abcdefghijk"),
        ("xoxp-123456789012-abcdefghijk", "123456789012-abcdefghijk"),
        ("glpat-abcdefghijklmnop1234", "abcdefghijklmnop1234"),
        ("r8_abcdefghijklmnopqrstuvwxyz1234567890", "abcdefghijklmnopqrstuvwxyz1234567890"),
        ("pplx-abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz"),
        ("nvapi-abcdefghijklmnopqrstuvwxyz12345", "abcdefghijklmnopqrstuvwxyz12345"),
        ('{"user": "admin"}', "admin"),  # a quoted value of a prose-like name still counts
        ("pass: hunter2", "hunter2"),  # and so does a credential-shaped one
    ],
)
def test_redaction_covers_these_credential_shapes(raw, leaked):
    cleaned = redact(raw)
    assert leaked not in cleaned and "[redacted]" in cleaned
    assert redact(cleaned) == cleaned


@pytest.mark.parametrize(
    ("raw", "leaked"),
    [
        ("[Errno 111] user=admin pass: hunter2", ("admin", "hunter2")),
        ("db=postgres://svc:pw@10.0.0.7/prod", ("svc", "pw@")),
        ("redis://cacheuser@10.0.0.8:6379/0", ("cacheuser",)),
        ("login failed: passwd=s3cret; username=root", ("s3cret", "root")),
        ('{"user": "admin", "password": "hunter2"}', ("admin", "hunter2")),
        ("Password: correct-horse", ("correct-horse",)),
    ],
)
def test_redact_covers_credential_pairs_and_url_userinfo(raw, leaked):
    cleaned = redact(raw)
    assert "[redacted]" in cleaned
    assert not [secret for secret in leaked if secret in cleaned]
    assert redact(cleaned) == cleaned


@pytest.mark.parametrize(
    ("raw", "leaked"),
    [
        ("GET /v1?key=abc,def;ghi&alt=sse", "def;ghi"),  # a query value runs to the next & # or space
        ("https://x/v1?access_token=ya29.a0-b_c#frag", "ya29.a0-b_c"),
        ("?API_KEY=zzz", "zzz"),
        ("&Token=t0k", "t0k"),
        ("https://user:pass@proxy.example/v1", "user:pass"),
        ("postgres://a:b:c@h/db", "a:b:c"),
        ("Invalid API key: sk-ant-api03-abcdefgh", "abcdefgh"),
    ],
)
def test_query_values_url_userinfo_and_vendor_keys_in_provider_messages(raw, leaked):
    cleaned = redact(raw)
    assert leaked not in cleaned and "[redacted]" in cleaned
    assert redact(cleaned) == cleaned


def test_the_configured_key_echoed_in_a_provider_message_is_redacted():
    message = "Invalid API key: sk-SECRETKEY1234567 (also sk-ant-api03-abcdefgh)"
    cleaned = redact(message, ("sk-SECRETKEY1234567",))
    assert "SECRETKEY" not in cleaned and "abcdefgh" not in cleaned
    assert cleaned.startswith("Invalid API key: ")


async def test_an_echoed_key_is_redacted_from_the_error_message() -> None:
    body = json.dumps({"error": {"message": f"Invalid API key: {KEY} (also sk-ant-api03-abcdefgh)"}}).encode()
    provider = _provider("openai", _transport([(401, {"content-type": "application/json"}, [body])]))
    result, _ = await run_stream(provider)
    assert result.error is not None and "SECRETKEY" not in result.error.message
    assert "abcdefgh" not in result.error.message and "SECRETKEY" not in str(result.error)
    assert "Invalid API key" in result.error.message


def test_repr_never_shows_url_credentials() -> None:
    provider = OpenAICompatProvider("https://user:sk-SECRETKEY123@proxy.example/v1?key=abc", "k", "m")
    assert "SECRET" not in repr(provider) and "key=abc" not in repr(provider)
    assert "proxy.example/v1" in repr(provider)


def test_a_known_secret_is_redacted_in_any_case():
    """A provider echoed the configured key upper-cased in its 401 text (the issue 16 trial)."""
    key = "sk-secretkey-attack16-zzz9876543"
    text = f"Incorrect API key provided (key {key.upper()}; was {key.title()})"
    assert redact(text, [key]) == "Incorrect API key provided (key [redacted]; was [redacted])"
