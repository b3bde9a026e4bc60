"""Dialogs and chats: create, resolve, switch, list, page history (seed 004 §6–§7)."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.db import transaction

from conversations.models import ChatState, Dialog, Message, now_ms
from conversations.storage.shapes import (
    DEFAULT_TITLE,
    NotFoundError,
    StorageError,
    dialog_summary,
    message_to_protocol,
    scrub_nul,
)


def _new_dialog(owner: Any, channel: str, chat_id: str, title: str | None = None) -> Dialog:
    for _ in range(5):
        dialog_id = secrets.token_hex(4)
        unified = Dialog.unified_id(channel, chat_id, dialog_id)
        if not Dialog.objects.filter(pk=unified).exists():
            return Dialog.objects.create(
                id=unified,
                channel=channel,
                chat_id=chat_id,
                dialog_id=dialog_id,
                owner=owner,
                title=title or DEFAULT_TITLE,
                title_is_default=not title,
                model=_configured_model(),
            )
    raise StorageError("could not allocate a dialog id")  # pragma: no cover - 2^32 space


def _configured_model() -> str:
    return settings.PICOBOT.get("LLM_MODEL") or settings.PICOBOT.get("LLM_PROVIDER") or "replay"


def active_dialog(owner: Any, channel: str, chat_id: str) -> Dialog:
    """The chat's active dialog, creating the chat state and a first dialog when there is none."""
    with transaction.atomic():
        state, _ = ChatState.objects.get_or_create(channel=channel, chat_id=chat_id, defaults={"owner": owner})
        dialog = state.active_dialog
        if dialog is None or dialog.deleted_at is not None:
            dialog = (
                Dialog.objects.filter(channel=channel, chat_id=chat_id, deleted_at__isnull=True)
                .order_by("-last_active_at")
                .first()
            ) or _new_dialog(owner, channel, chat_id)
            state.active_dialog = dialog
            state.updated_at = now_ms()
            state.save(update_fields=["active_dialog", "updated_at"])
        return dialog


def _set_active(channel: str, chat_id: str, owner: Any, dialog: Dialog) -> None:
    ChatState.objects.update_or_create(
        channel=channel, chat_id=chat_id, defaults={"owner": owner, "active_dialog": dialog, "updated_at": now_ms()}
    )


def create_dialog(owner: Any, channel: str, chat_id: str, title: str | None = None) -> Dialog:
    """A new dialog for the chat, made its active dialog (``/new [title]``, seed 004 §7)."""
    with transaction.atomic():
        dialog = _new_dialog(owner, channel, chat_id, scrub_nul(title.strip()) if title else None)
        _set_active(channel, chat_id, owner, dialog)
    return dialog


def switch_dialog(owner: Any, channel: str, chat_id: str, dialog_ref: str) -> Dialog:
    """Make one of the chat's dialogs active (``/switch <dialog_id>``); the unified id works too.

    Raises NotFoundError for an unknown, deleted or foreign dialog.
    """
    dialog_id = dialog_ref.rsplit(":", 1)[-1] if dialog_ref.startswith(f"{channel}:") else dialog_ref
    with transaction.atomic():
        dialog = Dialog.objects.filter(
            channel=channel, chat_id=chat_id, dialog_id=dialog_id, owner=owner, deleted_at__isnull=True
        ).first()
        if dialog is None:
            raise NotFoundError(f"no dialog {dialog_ref!r} in this chat")
        _set_active(channel, chat_id, owner, dialog)
    return dialog


def dialog_for_user(owner: Any, session_id: str) -> Dialog:
    """The live dialog ``session_id`` if ``owner`` owns it; raises NotFoundError otherwise."""
    dialog = Dialog.objects.filter(pk=session_id, owner=owner, deleted_at__isnull=True).first()
    if dialog is None:
        raise NotFoundError(f"no dialog {session_id!r}")
    return dialog


def list_sessions(owner: Any, channel: str, chat_id: str, limit: int = 10) -> list[dict]:
    """The chat's most recent dialogs as ``sessions`` items, most recent first."""
    active = active_dialog(owner, channel, chat_id)
    rows = Dialog.objects.filter(channel=channel, chat_id=chat_id, owner=owner, deleted_at__isnull=True)
    return [dialog_summary(d, active.id) for d in rows.order_by("-last_active_at")[:limit]]


def history_page(owner: Any, session_id: str, before_seq: int | None = None, limit: int = 50) -> dict:
    """``session_history`` payload: the newest ``limit`` rows below ``before_seq``, oldest first.

    Raises NotFoundError for a foreign or unknown dialog.
    """
    dialog = dialog_for_user(owner, session_id)
    rows = Message.objects.filter(dialog=dialog)
    if before_seq is not None:
        rows = rows.filter(seq__lt=before_seq)
    page = list(rows.order_by("-seq")[: limit + 1])
    has_more = len(page) > limit
    page = page[:limit]
    page.reverse()
    return {
        "session_id": dialog.id,
        "history_revision": dialog.history_revision,
        "messages": [message_to_protocol(m) for m in page],
        "has_more": has_more,
    }
