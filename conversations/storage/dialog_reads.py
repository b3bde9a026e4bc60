"""What clients read of dialogs: the ``sessions`` list, history pages and ``/info`` (seed 004 §7,
PROTOCOL §1 and §2). Each function is one short read; those given a session id raise
``NotFoundError`` for a foreign or unknown dialog."""

from __future__ import annotations

from typing import Any

from django.db.models import OuterRef, Q, Subquery
from django.db.models.functions import Substr

from conversations.models import ChatState, Dialog, InboxMessage, Message
from conversations.storage.dialogs import active_dialog, dialog_for_user
from conversations.storage.media import JsonListLength, media_types, without_media_data
from conversations.storage.outcomes import user_outcomes
from conversations.storage.shapes import dialog_summary, message_to_protocol
from conversations.usage.sums import dialog_usage, empty_usage

PREVIEW_CHARS = 100
PREVIEW_SCAN = 400  # characters read per dialog: enough for 100 once whitespace is collapsed


def preview_text(text: str | None, images: int = 0) -> str:
    """A dialog's first user message for a list: whitespace collapsed, at most 100 characters
    (an ellipsis marks a cut); "Image" / "N images" for a message of images alone; "" for none."""
    flat = " ".join((text or "").split())
    if not flat and images:
        return "Image" if images == 1 else f"{images} images"
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1].rstrip() + "…"


def list_sessions(owner: Any, channel: str, chat_id: str, limit: int = 10) -> list[dict]:
    """The chat's most recent dialogs as ``sessions`` items, most recent first."""
    return sessions_page(owner, channel, chat_id, limit=limit)["items"]


def sessions_page(
    owner: Any, channel: str, chat_id: str, *, limit: int = 10, offset: int = 0, query: str | None = None
) -> dict:
    """A page of the chat's dialogs for the ``sessions`` frame (PROTOCOL §1), most recent first.

    ``query`` keeps the dialogs whose title or first user message (its first ``PREVIEW_SCAN``
    characters) contains it, case-insensitively (Django's ``icontains``: SQLite folds ASCII
    letters only). Returns ``{items, has_more, offset}`` plus
    ``query`` when one was given; ``has_more`` says a page at ``offset + limit`` is not empty.
    Ordered by ``-last_active_at`` then id, so paging is stable among equal times. Each item's
    ``preview`` (the first user message, ``preview_text``: its text's head and its number of
    images, never the image data) comes in the same query, as subqueries.
    """
    active = active_dialog(owner, channel, chat_id)
    rows = Dialog.objects.filter(channel=channel, chat_id=chat_id, owner=owner, deleted_at__isnull=True)
    first_user = Message.objects.filter(dialog=OuterRef("pk"), role=Message.Role.USER).order_by("seq")
    rows = rows.annotate(
        first_text=Subquery(first_user.values(head=Substr("content", 1, PREVIEW_SCAN))[:1]),
        first_images=Subquery(first_user.values(n=JsonListLength("media_refs"))[:1]),
    )
    if query:
        rows = rows.filter(Q(title__icontains=query) | Q(first_text__icontains=query))
    page = list(rows.order_by("-last_active_at", "id")[offset : offset + limit + 1])
    answer: dict = {
        "items": [
            {**dialog_summary(d, active.id), "preview": preview_text(d.first_text, d.first_images or 0)}
            for d in page[:limit]
        ],
        "has_more": len(page) > limit,
        "offset": offset,
    }
    if query:
        answer["query"] = query
    return answer


def history_page(owner: Any, session_id: str, before_seq: int | None = None, limit: int = 50) -> dict:
    """``session_history`` payload: the newest ``limit`` rows below ``before_seq``, oldest first.

    Each user row carries its turn's ``outcome`` (``storage.turn_outcome``), read for the whole
    page in one more query (``user_outcomes``), and its images' ``media`` URLs, built from their
    types alone (the base64 data is never read: ``without_media_data``). Raises NotFoundError for
    a foreign or unknown dialog.
    """
    dialog = dialog_for_user(owner, session_id)
    rows = without_media_data(Message.objects.filter(dialog=dialog))
    if before_seq is not None:
        rows = rows.filter(seq__lt=before_seq)
    page = list(rows.order_by("-seq")[: limit + 1])
    has_more = len(page) > limit
    page = page[:limit]
    page.reverse()
    outcomes = user_outcomes([m.id for m in page if m.role == Message.Role.USER])
    return {
        "session_id": dialog.id,
        "history_revision": dialog.history_revision,
        "messages": [
            message_to_protocol(m, outcome=outcomes.get(str(m.id)), media_types=media_types(m)) for m in page
        ],
        "has_more": has_more,
    }


def dialog_info(owner: Any, session_id: str) -> dict:
    """``/info`` and ``GET /api/dialogs/{id}``: title, ids, counts, times (ms), model, usage.

    Shape: ``{session_id, dialog_id, channel, chat_id, title, title_is_default, message_count
    (user messages), total_message_count, history_revision, created_at, last_active_at, model,
    usage: {calls, input_tokens, output_tokens, cached_tokens, cost}, compacted_through_seq, queued,
    running, active}``; ``usage`` sums the dialog's usage rows (every provider call: turns,
    titles, compactions; issue 17). Raises NotFoundError.
    """
    dialog = dialog_for_user(owner, session_id)
    statuses = list(
        InboxMessage.objects.filter(
            dialog=dialog, status__in=[InboxMessage.Status.QUEUED, InboxMessage.Status.STARTED]
        ).values_list("status", flat=True)
    )
    active_id = (
        ChatState.objects.filter(channel=dialog.channel, chat_id=dialog.chat_id)
        .values_list("active_dialog_id", flat=True)
        .first()
    )
    return dialog_fields(
        dialog,
        queued=statuses.count(InboxMessage.Status.QUEUED),
        running=InboxMessage.Status.STARTED in statuses,
        active=active_id == dialog.id,
        usage=dialog_usage([dialog.id]).get(dialog.id),
    )


def dialog_fields(
    dialog: Dialog, *, queued: int, running: bool, active: bool, usage: dict | None = None
) -> dict:
    """A dialog in ``dialog_info``'s shape, from its row, its inbox/chat facts and its usage sums
    (``usage.sums.dialog_usage``; None: no rows yet) (no queries)."""
    return {
        "session_id": dialog.id,
        "dialog_id": dialog.dialog_id,
        "channel": dialog.channel,
        "chat_id": dialog.chat_id,
        "title": dialog.title,
        "title_is_default": dialog.title_is_default,
        "message_count": dialog.message_count,
        "total_message_count": dialog.total_message_count,
        "history_revision": dialog.history_revision,
        "created_at": dialog.created_at,
        "last_active_at": dialog.last_active_at,
        "model": dialog.model,
        "usage": usage or empty_usage(),
        "compacted_through_seq": dialog.summary_seq,
        "queued": queued,
        "running": running,
        "active": active,
    }
