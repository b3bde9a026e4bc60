"""The images a user attached to a message, by the URL its history row names (PROTOCOL §2).

History rows carry ``media: [{mime_type, url}]`` (PROTOCOL §1), never the base64 data; this route
answers one ``url`` with the decoded bytes. Authenticated like every other route (token or the
WebUI's session); another user's dialog answers 404 like an unknown one.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import Path, Router

from conversations import storage
from conversations.agent.media import IMAGE_SIGNATURES
from conversations.api.common import SessionId, checked, errors
from conversations.storage.runner import run_storage

MEDIA_MAX_AGE_SECONDS = 365 * 24 * 3600
"""An image at a URL never changes (a message's images are fixed at send): cache it a year, but
only privately (it is the user's, behind their login)."""

router = Router()

_IMAGE_RESPONSE = {
    200: {
        "description": "the image's bytes, of the type it was sent with",
        "content": {mime: {"schema": {"type": "string", "format": "binary"}} for mime in IMAGE_SIGNATURES},
    }
}


@router.get(
    "/dialogs/{path:session_id}/messages/{message_id}/media/{int:index}",
    response=errors(404),
    openapi_extra={"responses": _IMAGE_RESPONSE},
    tags=["messages"],
)
async def message_media(
    request: HttpRequest,
    session_id: str = SessionId,
    message_id: str = Path(..., min_length=1, max_length=64, description="the user message's `id`"),
    index: int = Path(..., ge=0, description="the image's position in the message's `media`, from 0"),
) -> HttpResponse:
    """The ``index``-th image of a user message, as in its history row's ``media[index].url``.

    200 with the decoded bytes, ``Content-Type`` the image's type (PNG, JPEG, GIF or WebP only),
    ``Cache-Control: private, max-age=31536000, immutable``, ``X-Content-Type-Options: nosniff``
    and ``Content-Disposition: inline``. 404 ``not_found`` for another user's, a deleted or an
    unknown dialog, an unknown message, one that is not the user's, and an index without an image.
    """
    mime_type, data = await run_storage(
        storage.message_image, request.auth, checked(session_id), message_id, index
    )
    response = HttpResponse(data, content_type=mime_type)
    response["Cache-Control"] = f"private, max-age={MEDIA_MAX_AGE_SECONDS}, immutable"
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Disposition"] = "inline"
    return response
