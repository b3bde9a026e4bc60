"""open_envelope: decrypt, URL verification, signature and token checks, limits (FEISHU.md §4)."""

from __future__ import annotations

import base64
import hashlib
import json
import os

import pytest
from Crypto.Cipher import AES

from conversations.feishu.envelope import (
    MAX_BODY_BYTES,
    EnvelopeRejected,
    UrlVerification,
    VerifiedEvent,
    decrypt,
    open_envelope,
)
from tests.conversations.feishu.conftest import VERIFICATION_TOKEN, message_event

KEY = "encrypt-key-for-tests"


def encrypt(plain: bytes, key: str = KEY) -> str:
    iv = os.urandom(16)
    pad = 16 - len(plain) % 16
    cipher = AES.new(hashlib.sha256(key.encode()).digest(), AES.MODE_CBC, iv)
    return base64.b64encode(iv + cipher.encrypt(plain + bytes([pad]) * pad)).decode()


def signed(body: bytes, key: str = KEY, *, timestamp: str = "1700000000", nonce: str = "n0nce") -> dict:
    signature = hashlib.sha256((timestamp + nonce + key).encode() + body).hexdigest()
    return {
        "x-lark-request-timestamp": timestamp,
        "x-lark-request-nonce": nonce,
        "x-lark-signature": signature,
    }


def open_(body: bytes, headers: dict | None = None, *, key: str | None = None):
    return open_envelope(body, headers or {}, verification_token=VERIFICATION_TOKEN, encrypt_key=key)


def test_the_documented_test_vector_decrypts():
    assert decrypt("P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=", "test key") == b"hello world"


def test_a_plain_event_with_the_right_token_is_verified():
    event = message_event("om_1")
    assert open_(json.dumps(event).encode()) == VerifiedEvent(event)


def test_url_verification_answers_the_challenge_plain_or_encrypted_and_checks_the_token():
    plain = {"type": "url_verification", "challenge": "c-123", "token": VERIFICATION_TOKEN}
    assert open_(json.dumps(plain).encode()) == UrlVerification("c-123")
    body = json.dumps({"encrypt": encrypt(json.dumps(plain).encode())}).encode()
    assert open_(body, key=KEY) == UrlVerification("c-123")  # no signature on this request
    with pytest.raises(EnvelopeRejected) as info:
        open_(json.dumps({**plain, "token": "wrong"}).encode())
    assert info.value.status == 401


def test_an_encrypted_event_needs_a_valid_signature_over_the_raw_body():
    event = message_event("om_1")
    body = json.dumps({"encrypt": encrypt(json.dumps(event).encode())}).encode()
    assert open_(body, signed(body), key=KEY) == VerifiedEvent(event)
    for headers in ({}, signed(body, "another key"), signed(body + b" ")):
        with pytest.raises(EnvelopeRejected) as info:
            open_(body, headers, key=KEY)
        assert info.value.status == 401


def test_with_an_encrypt_key_an_unencrypted_event_still_needs_the_signature():
    body = json.dumps(message_event("om_1")).encode()
    with pytest.raises(EnvelopeRejected) as info:
        open_(body, key=KEY)
    assert info.value.status == 401
    assert isinstance(open_(body, signed(body), key=KEY), VerifiedEvent)


@pytest.mark.parametrize(
    ("body", "key", "status"),
    [
        (b"{not json", None, 400),
        (b"[1, 2]", None, 400),
        (b"\xff\xfe", None, 400),
        (json.dumps({"encrypt": "AAAA"}).encode(), None, 400),  # encrypted, no key configured
        (json.dumps({"encrypt": "not base64!"}).encode(), KEY, 400),
        (json.dumps({"encrypt": encrypt(b"{}", "other key")}).encode(), KEY, 400),
        (json.dumps({"encrypt": encrypt(b"not json")}).encode(), KEY, 400),
        (json.dumps(message_event("om_1", token="wrong")).encode(), None, 401),
        (json.dumps({"schema": "2.0", "header": {}, "event": {}}).encode(), None, 401),
        (b" " * (MAX_BODY_BYTES + 1), None, 413),
    ],
)
def test_bad_deliveries_are_rejected_with_their_status(body, key, status):
    with pytest.raises(EnvelopeRejected) as info:
        open_(body, signed(body) if key else {}, key=key)
    assert info.value.status == status
    assert VERIFICATION_TOKEN not in info.value.reason and KEY not in info.value.reason
