"""The images of user rows: their types for history pages without the data, and one image's
bytes for ``GET /api/dialogs/{session_id}/messages/{message_id}/media/{index}`` (PROTOCOL §2).

A user row's ``media_refs`` holds ``[{mime_type, data (base64)}]``, up to 5 MiB decoded
(``agent.media``). A history page needs only the types (``media`` URLs, PROTOCOL §1), so it reads
them in the database with one JSON expression per row (:class:`MimeTypes`) and never transfers
the data, as a dialog list counts a row's images (:class:`JsonListLength`); the image route reads the data of one item with JSON key lookups (``KT``).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from typing import Any

from django.db.models import Func, IntegerField, JSONField, QuerySet
from django.db.models.fields.json import KT

from conversations.agent.media import IMAGE_SIGNATURES, MAX_MEDIA_ITEMS
from conversations.models import Message
from conversations.storage.shapes import NotFoundError


class MimeTypes(Func):
    """The ``mime_type`` of each item of a JSON list column, as a JSON list, in one expression.

    One JSON expression reads the value once (a ``KT`` lookup per item would read a row's
    megabytes of base64 once per item). SQLite: ``json_extract`` with one path per possible item
    (``MAX_MEDIA_ITEMS``) answers ``[type, …, null, …]``; PostgreSQL: ``jsonb_path_query_array``
    answers ``[type, …]``. PicoBot runs on these two only (``picobot_site.settings``).
    """

    arity = 1
    output_field = JSONField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        paths = ", ".join(f"'$[{i}].mime_type'" for i in range(MAX_MEDIA_ITEMS))
        return self.as_sql(compiler, connection, template=f"json_extract(%(expressions)s, {paths})", **extra)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        template = "jsonb_path_query_array(%(expressions)s, '$[*].mime_type')"
        return self.as_sql(compiler, connection, template=template, **extra)


class JsonListLength(Func):
    """The number of items of a JSON list column (0 for anything else), read in the database:
    SQLite ``json_array_length``, PostgreSQL ``jsonb_array_length`` (a row's images are never
    transferred to count them)."""

    arity = 1
    output_field = IntegerField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        template = "COALESCE(json_array_length(%(expressions)s), 0)"
        return self.as_sql(compiler, connection, template=template, **extra)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        template = (
            "(CASE WHEN jsonb_typeof(%(expressions)s) = 'array' "
            "THEN jsonb_array_length(%(expressions)s) ELSE 0 END)"
        )
        return self.as_sql(compiler, connection, template=template, **extra)


def without_media_data(rows: QuerySet[Message]) -> QuerySet[Message]:
    """``rows`` without ``media_refs`` and ``provider_state`` (deferred: never fetched), with the
    image types annotated for :func:`media_types` (:class:`MimeTypes`; stored rows never hold
    more than ``MAX_MEDIA_ITEMS`` images: ``agent.media.validate_media`` and the import check)."""
    return rows.defer("media_refs", "provider_state").annotate(_media_types=MimeTypes("media_refs"))


def media_types(row: Message) -> list[str]:
    """The image types of a row read by :func:`without_media_data`, in attachment order; ``[]``
    for none (also for an assistant or tool row)."""
    types = []
    for value in getattr(row, "_media_types", None) or []:
        if not isinstance(value, str):
            break  # SQLite's answer pads the missing items with null
        types.append(value)
    return types


def message_image(owner: Any, session_id: str, message_id: str, index: int) -> tuple[str, bytes]:
    """``(mime type, decoded bytes)`` of the ``index``-th image of the user row ``message_id`` of
    ``owner``'s live dialog ``session_id``. One query; reads that one item's data only.

    Only the types ``agent.media`` accepts are ever returned, and only when the bytes match the
    type's magic bytes (they were checked on arrival; this keeps a bad row from being served as
    something a browser would run).

    Raises:
        NotFoundError: another user's, a deleted or an unknown dialog; an unknown message, one
            of another dialog or not a user row; no image at ``index``; a stored item that is not
            a valid image of an accepted type.
    """
    try:
        message_uuid = uuid.UUID(message_id)
    except ValueError:
        raise NotFoundError("no such message") from None
    if not 0 <= index < MAX_MEDIA_ITEMS:
        raise NotFoundError("no such image")
    found = (
        Message.objects.filter(
            pk=message_uuid,
            dialog_id=session_id,
            dialog__owner=owner,
            dialog__deleted_at__isnull=True,
            role=Message.Role.USER,
        )
        .annotate(
            _mime_type=KT(f"media_refs__{index}__mime_type"),
            _data=KT(f"media_refs__{index}__data"),
        )
        .values_list("_mime_type", "_data")
        .first()
    )
    if found is None:
        raise NotFoundError("no such message")
    mime_type, data = found
    if mime_type not in IMAGE_SIGNATURES or not isinstance(data, str):
        raise NotFoundError("no such image")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise NotFoundError("no such image") from None
    if not IMAGE_SIGNATURES[mime_type](raw):
        raise NotFoundError("no such image")
    return mime_type, raw
