"""Validation of media attached to a user message (PROTOCOL §1 ``message.media``).

Pure: no Django. Images only, base64 ``data``, at most 5 MiB decoded in all.
"""

from __future__ import annotations

import base64
import binascii

MAX_MEDIA_BYTES = 5 * 1024 * 1024
MAX_MEDIA_ITEMS = 8


class MediaError(ValueError):
    """The media list is invalid; the message says why (shown to the client)."""


def validate_media(media: object) -> list[dict]:
    """Return ``media`` as ``[{mime_type, data}]`` after checking it.

    Raises:
        MediaError: not a list of ``{mime_type: "image/…", data: <base64>}`` objects, more than
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
        if not isinstance(mime_type, str) or not mime_type.startswith("image/") or len(mime_type) > 100:
            raise MediaError(f"media[{index}].mime_type must be an image type such as image/png")
        if not isinstance(data, str) or not data:
            raise MediaError(f"media[{index}].data must be base64 text")
        try:
            total += len(base64.b64decode(data, validate=True))
        except (binascii.Error, ValueError):
            raise MediaError(f"media[{index}].data is not valid base64") from None
        if total > MAX_MEDIA_BYTES:
            raise MediaError("media exceed 5 MiB in all")
        clean.append({"mime_type": mime_type, "data": data})
    return clean
