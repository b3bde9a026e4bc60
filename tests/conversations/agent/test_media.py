"""Image attachments are checked before they enter a dialog (PROTOCOL §1 ``message.media``)."""

from __future__ import annotations

import base64

import pytest

from conversations.agent.media import MAX_MEDIA_BYTES, MediaError, validate_media

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 16).decode()
WEBP = base64.b64encode(b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8).decode()
SVG = base64.b64encode(b"<svg xmlns='http://www.w3.org/2000/svg'/>").decode()


def test_supported_images_pass_unchanged():
    media = [
        {"mime_type": "image/png", "data": PNG},
        {"mime_type": "image/jpeg", "data": JPEG},
        {"mime_type": "image/webp", "data": WEBP},
    ]
    assert validate_media(media) == media


@pytest.mark.parametrize(
    ("media", "message"),
    [
        ("nope", "must be a list"),
        ([{"mime_type": "image/svg+xml", "data": SVG}], "mime_type must be one of"),
        ([{"mime_type": "image/png", "data": JPEG}], "is not an image of type image/png"),
        ([{"mime_type": "image/png", "data": "%%%"}], "not valid base64"),
        ([{"mime_type": "image/png"}], "must be base64 text"),
        ([PNG], "must be an object"),
        ([{"mime_type": "image/png", "data": PNG}] * 9, "at most 8"),
    ],
)
def test_bad_media_is_refused_with_a_reason(media, message):
    with pytest.raises(MediaError, match=message):
        validate_media(media)


def test_more_than_five_mib_in_all_is_refused():
    big = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * (MAX_MEDIA_BYTES // 2)).decode()
    with pytest.raises(MediaError, match="exceed 5 MiB"):
        validate_media([{"mime_type": "image/png", "data": big}] * 3)
