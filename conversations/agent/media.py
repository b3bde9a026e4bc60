"""Validation of media attached to a user message (PROTOCOL §1 ``message.media``).

Pure: no Django. Images only, base64 ``data``, at most 5 MiB decoded in all. Only the formats
every vision API accepts (PNG, JPEG, GIF, WebP), checked by their magic bytes: one image a
provider refuses would otherwise make every later request of the dialog fail, since history is
re-sent.
"""

from __future__ import annotations

import base64
import binascii

MAX_MEDIA_BYTES = 5 * 1024 * 1024
MAX_MEDIA_ITEMS = 8
# mime type → magic-byte check of the decoded data.
IMAGE_SIGNATURES = {
    "image/png": lambda b: b.startswith(b"\x89PNG\r\n\x1a\n"),
    "image/jpeg": lambda b: b.startswith(b"\xff\xd8\xff"),
    "image/gif": lambda b: b.startswith((b"GIF87a", b"GIF89a")),
    "image/webp": lambda b: b[:4] == b"RIFF" and b[8:12] == b"WEBP",
}


class MediaError(ValueError):
    """The media list is invalid; the message says why (shown to the client)."""


def validate_media(media: object) -> list[dict]:
    """Return ``media`` as ``[{mime_type, data}]`` after checking it.

    Raises:
        MediaError: not a list of ``{mime_type, data: <base64>}`` images of a supported type whose
            bytes match it, more than
            ``MAX_MEDIA_ITEMS`` items, or more than 5 MiB decoded in all.
    """
    if not isinstance(media, list):
        raise MediaError("media must be a list")
    if len(media) > MAX_MEDIA_ITEMS:
        raise MediaError(f"at most {MAX_MEDIA_ITEMS} media items per message")
    total = 0
    clean: list[dict] = []
    for index, item in enumerate(media):
        if not isinstance(item, dict):
            raise MediaError(f"media[{index}] must be an object")
        mime_type, data = item.get("mime_type"), item.get("data")
        if mime_type not in IMAGE_SIGNATURES:
            raise MediaError(f"media[{index}].mime_type must be one of {', '.join(IMAGE_SIGNATURES)}")
        if not isinstance(data, str) or not data:
            raise MediaError(f"media[{index}].data must be base64 text")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise MediaError(f"media[{index}].data is not valid base64") from None
        if not IMAGE_SIGNATURES[mime_type](raw):
            raise MediaError(f"media[{index}].data is not an image of type {mime_type}")
        total += len(raw)
        if total > MAX_MEDIA_BYTES:
            raise MediaError("media exceed 5 MiB in all")
        clean.append({"mime_type": mime_type, "data": data})
    return clean
