"""Opening a webhook delivery: size, JSON, decryption, URL verification, signature, token (FEISHU.md §4).

:func:`open_envelope` takes the raw request body and its headers and returns a
:class:`UrlVerification` (answer ``{"challenge": …}`` at once) or a :class:`VerifiedEvent` (hand
``event`` to the receiver), or raises :class:`EnvelopeRejected` with the HTTP status to answer:

- 413: the body is larger than :data:`MAX_BODY_BYTES`;
- 400: not a JSON object, an encrypted body that does not decrypt (or no Encrypt Key configured);
- 401: a wrong or missing Verification Token, or — with an Encrypt Key — a missing or wrong
  ``X-Lark-Signature`` (checked on the raw body before anything is used).

The checks follow the platform's order: decrypt, answer a URL verification (token checked, no
signature on it), else verify the signature (with an Encrypt Key) and the token. Comparisons are
constant-time. Pure: no Django; AES from pycryptodome.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from Crypto.Cipher import AES

__all__ = [
    "MAX_BODY_BYTES",
    "EnvelopeRejected",
    "UrlVerification",
    "VerifiedEvent",
    "decrypt",
    "open_envelope",
]

#: Larger than any event the platform sends (a message event is a few KB; text ≤ 150 KB).
MAX_BODY_BYTES = 512 * 1024


class EnvelopeRejected(Exception):
    """The delivery is refused; nothing of it is processed.

    Attributes:
        status: The HTTP status to answer (400, 401 or 413).
        reason: Why, for the log and the answer body (never a secret).
    """

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class UrlVerification:
    """The platform checks the request URL: answer ``{"challenge": challenge}`` within 1 s."""

    challenge: str


@dataclass(frozen=True)
class VerifiedEvent:
    """An authentic event body (decrypted): ``{"schema": "2.0", "header": …, "event": …}``."""

    event: dict[str, Any]


def decrypt(blob: str, encrypt_key: str) -> bytes:
    """The plaintext of an ``encrypt`` field: AES-256-CBC with key = SHA-256(Encrypt Key), the IV
    the first 16 bytes of the base64-decoded blob, PKCS#7 padding (FEISHU.md §4).

    Raises:
        ValueError: Not base64, a wrong length, or bad padding (a wrong key).
    """
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64") from exc
    if len(raw) < 32 or len(raw) % 16:
        raise ValueError("not a whole number of AES blocks")
    key = hashlib.sha256(encrypt_key.encode("utf-8")).digest()
    plain = AES.new(key, AES.MODE_CBC, raw[:16]).decrypt(raw[16:])
    pad = plain[-1]
    if not 1 <= pad <= 16 or plain[-pad:] != bytes([pad]) * pad:
        raise ValueError("bad padding (a wrong Encrypt Key?)")
    return plain[:-pad]


def open_envelope(
    body: bytes,
    headers: dict[str, str],
    *,
    verification_token: str,
    encrypt_key: str | None,
) -> UrlVerification | VerifiedEvent:
    """Checks one delivery (module docstring). ``headers`` are lower-cased names."""
    if len(body) > MAX_BODY_BYTES:
        raise EnvelopeRejected(413, f"body over {MAX_BODY_BYTES} bytes")
    outer = _json_object(body, "body")
    if "encrypt" in outer:
        if not encrypt_key:
            raise EnvelopeRejected(400, "an encrypted event, but PICOBOT_FEISHU_ENCRYPT_KEY is not set")
        if not isinstance(outer["encrypt"], str):
            raise EnvelopeRejected(400, "encrypt is not a string")
        try:
            plain = decrypt(outer["encrypt"], encrypt_key)
        except ValueError as exc:
            raise EnvelopeRejected(400, f"the event does not decrypt: {exc}") from None
        payload = _json_object(plain, "decrypted event")
    else:
        payload = outer
    if payload.get("type") == "url_verification":
        if not _same(payload.get("token"), verification_token):
            raise EnvelopeRejected(401, "wrong verification token")
        challenge = payload.get("challenge")
        if not isinstance(challenge, str):
            raise EnvelopeRejected(400, "url_verification without a challenge")
        return UrlVerification(challenge)
    if encrypt_key:
        _check_signature(body, headers, encrypt_key)
    header = payload.get("header")
    token = header.get("token") if isinstance(header, dict) else payload.get("token")
    if not _same(token, verification_token):
        raise EnvelopeRejected(401, "wrong verification token")
    return VerifiedEvent(payload)


def _check_signature(body: bytes, headers: dict[str, str], encrypt_key: str) -> None:
    timestamp = headers.get("x-lark-request-timestamp", "")
    nonce = headers.get("x-lark-request-nonce", "")
    signature = headers.get("x-lark-signature", "")
    if not (timestamp and nonce and signature):
        raise EnvelopeRejected(401, "missing X-Lark-Signature headers")
    expected = hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()
    if not hmac.compare_digest(expected, signature.strip().lower()):
        raise EnvelopeRejected(401, "wrong signature")


def _same(given: Any, expected: str) -> bool:
    return (
        isinstance(given, str) and bool(expected) and hmac.compare_digest(given.encode(), expected.encode())
    )


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep
        raise EnvelopeRejected(400, f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise EnvelopeRejected(400, f"{what} is not a JSON object")
    return value
