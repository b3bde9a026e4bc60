"""Dialogs and chats: resolve, create, switch, rename, delete (seed 004 §6–§7)."""

from __future__ import annotations

import secrets
import unicodedata
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F

from conversations.models import BackgroundTask, ChatState, Dialog, InboxMessage, now_ms
from conversations.storage import sql
from conversations.storage.shapes import (
    DEFAULT_TITLE,
    NotFoundError,
    StorageError,
    shown_ref,
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
            )
    raise StorageError("could not allocate a dialog id")  # pragma: no cover - 2^32 space


def active_dialog(owner: Any, channel: str, chat_id: str) -> Dialog:
    """The chat's active dialog, creating the chat state and a first dialog when there is none."""
    return active_dialog_created(owner, channel, chat_id)[0]


def active_dialog_created(owner: Any, channel: str, chat_id: str) -> tuple[Dialog, bool]:
    """``(dialog, created)``: the chat's active dialog, and whether it was just created.

    A chat without an active dialog (first contact, or its active one was deleted) gets its most
    recent live dialog, or a new one (``created``: the caller sends the welcome, seed 004 §6.2).
    """
    with transaction.atomic():
        state, dialog, created = _active_state(owner, channel, chat_id)
        return dialog, created


def _active_state(owner: Any, channel: str, chat_id: str) -> tuple[ChatState, Dialog, bool]:
    """``active_dialog_created`` with the chat state row; call inside a transaction."""
    state = sql.chat_state(channel, chat_id)
    if state is None:  # first contact
        state, _ = ChatState.objects.select_related("active_dialog").get_or_create(
            channel=channel, chat_id=chat_id, defaults={"owner": owner}
        )
        dialog = state.active_dialog
    else:
        dialog = sql.dialog_row(state.active_dialog_id) if state.active_dialog_id else None
    created = False
    if dialog is None or dialog.deleted_at is not None or not _owned_by(dialog, owner):
        dialog = _most_recent_live(owner, channel, chat_id)
        if dialog is None:
            dialog, created = _new_dialog(owner, channel, chat_id), True
        state.active_dialog = dialog
        state.updated_at = now_ms()
        state.save(update_fields=["active_dialog", "updated_at"])
    return state, dialog, created


def _owned_by(dialog: Dialog, owner: Any) -> bool:
    """Whether ``dialog`` belongs to ``owner`` (an ownerless caller, e.g. a system sink, owns ownerless rows)."""
    return dialog.owner_id == (owner.pk if owner is not None else None)


def _most_recent_live(owner: Any, channel: str, chat_id: str, *, exclude: str | None = None) -> Dialog | None:
    """The chat's most recently active live dialog of ``owner``, or None.

    Filtered by owner: a row of the same chat id but another (or no) owner — an import, a
    reused user id — never becomes someone's active dialog.
    """
    rows = Dialog.objects.filter(channel=channel, chat_id=chat_id, deleted_at__isnull=True, owner=owner)
    if exclude:
        rows = rows.exclude(pk=exclude)
    return rows.order_by("-last_active_at").first()


def session_ttl_ms() -> int:
    """The idle TTL of a chat's active dialog in ms (``PICOBOT_SESSION_TTL_HOURS``; 0 = never)."""
    return int(settings.PICOBOT.session_ttl_hours * 3_600_000)


@dataclass(frozen=True)
class ResolvedDialog:
    """The dialog an inbound message goes to (seed 004 §6.2 step 1).

    ``created``: the dialog was made for this message (announce it with ``session_changed`` and
    the welcome). ``replaced``: the idle dialog it replaced as the chat's active one (idle reset,
    DESIGN §6), or None.
    """

    dialog: Dialog
    created: bool = False
    replaced: Dialog | None = None


def resolve_dialog(owner: Any, channel: str, chat_id: str, session_id: str | None = None) -> ResolvedDialog:
    """Resolve the dialog of an inbound message (seed 004 §6.2 step 1, DESIGN §6 "idle reset").

    An explicit ``session_id`` is that dialog (the owner's, live). Otherwise the chat's active
    dialog — unless it has been idle longer than the TTL (``session_ttl_ms``), has history and
    nothing queued or running: then a new dialog becomes active (the old one stays in
    ``/sessions``). No active dialog at all → the most recent live one, or a new one.

    Raises:
        NotFoundError: ``session_id`` is unknown, deleted or foreign.
    """
    if session_id:
        return ResolvedDialog(dialog_for_user(owner, session_id))
    ttl = session_ttl_ms()
    with transaction.atomic():
        state, dialog, created = _active_state(owner, channel, chat_id)
        # Becoming active (/switch, /new, a delete's successor) is activity too: a dialog the user
        # just chose is continued, never reset away (ChatState.updated_at).
        last_activity = max(dialog.last_active_at, state.updated_at or 0)
        if created or ttl <= 0 or dialog.message_count == 0 or last_activity >= now_ms() - ttl:
            return ResolvedDialog(dialog, created=created)
        busy = InboxMessage.objects.filter(
            dialog=dialog, status__in=[InboxMessage.Status.QUEUED, InboxMessage.Status.STARTED]
        ).exists()
        if busy:
            return ResolvedDialog(dialog)
        fresh = _new_dialog(owner, channel, chat_id)
        _set_active(channel, chat_id, owner, fresh)
        return ResolvedDialog(fresh, created=True, replaced=dialog)


def _set_active(channel: str, chat_id: str, owner: Any, dialog: Dialog) -> None:
    ChatState.objects.update_or_create(
        channel=channel,
        chat_id=chat_id,
        defaults={"owner": owner, "active_dialog": dialog, "updated_at": now_ms()},
    )


def create_dialog(owner: Any, channel: str, chat_id: str, title: str | None = None) -> Dialog:
    """A new dialog for the chat, made its active dialog (``/new [title]``, seed 004 §7).

    Raises ValueError for a bad title (``clean_user_title``).
    """
    with transaction.atomic():
        dialog = _new_dialog(
            owner, channel, chat_id, clean_user_title(title) if title and title.strip() else None
        )
        _set_active(channel, chat_id, owner, dialog)
    return dialog


def dialog_in_chat(owner: Any, channel: str, chat_id: str, dialog_ref: str) -> Dialog:
    """One of the chat's live dialogs by its short ``dialog_id`` or its unified id.

    Raises NotFoundError for an unknown, deleted or foreign dialog, or one of another chat.
    """
    dialog_id = dialog_ref.rsplit(":", 1)[-1] if dialog_ref.startswith(f"{channel}:") else dialog_ref
    dialog = Dialog.objects.filter(
        channel=channel, chat_id=chat_id, dialog_id=dialog_id, owner=owner, deleted_at__isnull=True
    ).first()
    if dialog is None or (":" in dialog_ref and dialog.id != dialog_ref):
        raise NotFoundError(f"no dialog {shown_ref(dialog_ref)} in this chat")
    return dialog


def switch_dialog(owner: Any, channel: str, chat_id: str, dialog_ref: str) -> Dialog:
    """Make one of the chat's dialogs active (``/switch <dialog_id>``); the unified id works too.

    Raises NotFoundError for an unknown, deleted or foreign dialog.
    """
    with transaction.atomic():
        dialog = dialog_in_chat(owner, channel, chat_id, dialog_ref)
        _set_active(channel, chat_id, owner, dialog)
    return dialog


def dialog_for_user(owner: Any, session_id: str) -> Dialog:
    """The live dialog ``session_id`` if ``owner`` owns it; raises NotFoundError otherwise."""
    dialog = Dialog.objects.filter(pk=session_id, owner=owner, deleted_at__isnull=True).first()
    if dialog is None:
        raise NotFoundError(f"no dialog {shown_ref(session_id)}")
    return dialog


# --- rename, delete (seed 004 §6.3, §7) ---------------------------------------------------

MAX_TITLE_CHARS = 200


def clean_user_title(title: str) -> str:
    """A user-given title, whitespace collapsed; raises ValueError when empty, too long or holding
    control characters. Format characters stay: emoji sequences (ZWJ) and Persian (ZWNJ) need them."""
    text = " ".join(title.split())
    if not text:
        raise ValueError("a title cannot be empty")
    if len(text) > MAX_TITLE_CHARS:
        raise ValueError(f"a title has at most {MAX_TITLE_CHARS} characters")
    if any(unicodedata.category(c) in ("Cc", "Cs", "Co", "Cn") for c in text):
        raise ValueError("a title cannot hold control or unassigned characters")
    return text


def rename_dialog(owner: Any, session_id: str, title: str) -> Dialog:
    """Rename a dialog (``/rename``, the admin, ``PATCH /api/dialogs``): a user title always wins.

    Sets ``title_is_default = False``, so a title generated in the background that lands later is
    discarded (seed 000 §12). Raises NotFoundError (foreign, deleted, unknown) or ValueError
    (bad title, see ``clean_user_title``).
    """
    text = clean_user_title(title)
    with transaction.atomic():
        dialog = dialog_for_user(owner, session_id)
        Dialog.objects.filter(pk=dialog.pk).update(
            title=text, title_is_default=False, state_version=F("state_version") + 1
        )
    dialog.title, dialog.title_is_default = text, False
    return dialog


def set_dialog_model(owner: Any, session_id: str, model: str) -> Dialog:
    """Choose the dialog's model preset (``/model NAME``, ``PATCH /api/dialogs``; issue 17).

    ``model`` is a preset name the caller checked against the catalog, or "" for the default.
    The next turn uses it (``start_next_turn`` reads it); a running turn keeps its own. Raises
    NotFoundError (foreign, deleted, unknown).
    """
    with transaction.atomic():
        dialog = dialog_for_user(owner, session_id)
        Dialog.objects.filter(pk=dialog.pk).update(model=model)
    dialog.model = model
    return dialog


#: The ``error`` of a deleted dialog's inbox rows that never ran or never finished.
DELETED_DIALOG_ERROR = "the dialog was deleted"


@dataclass(frozen=True)
class DeletedDialog:
    """What ``delete_dialog`` did.

    ``deleted``: the soft-deleted dialog. ``active``: the chat's active dialog afterwards;
    ``active_changed``: the deleted dialog was the active one (announce ``active``);
    ``active_created``: ``active`` is a new empty dialog (nothing else was left; send the welcome).
    ``running_turn``: a turn of the deleted dialog was running (the caller asks workers to stop
    it). ``dropped_queued``: queued messages that will now never run.
    """

    deleted: Dialog
    active: Dialog
    active_changed: bool
    active_created: bool
    running_turn: bool
    dropped_queued: int


def delete_dialog(owner: Any, channel: str, chat_id: str, session_id: str) -> DeletedDialog:
    """Soft-delete a dialog of the chat (``/delete``, seed 004 §6.3; DESIGN §3 ``deleted_at``).

    It disappears for users at once (every lookup filters ``deleted_at``); ``purge`` removes it
    physically after the retention. Its queued messages are dropped (inbox rows end ``done`` with
    an error). Deleting the active dialog makes the chat's most recent other live dialog active,
    or a new one. Raises NotFoundError for a foreign, deleted or unknown dialog, or one of another
    chat.

    Deleting is a generation change (seed 003 §8.3): the lease epoch is bumped and the lease
    freed, so a running turn's owner fails its next renewal or its commit and drops the turn as
    stale — nothing committed, nothing published. Its ``started`` row ends ``done`` here (error
    "the dialog was deleted", its notice marked sent: no "interrupted by a restart" notice ever),
    and no worker claims a deleted dialog again (``claim_lease``, ``dialogs_needing_work``). Its
    schedules are disabled, and no longer found by their owner (``storage.schedules``); its
    running background tasks are asked to stop (their worker's next heartbeat cancels them, with
    no notice: nobody to tell).
    """
    now = now_ms()
    with transaction.atomic():
        dialog = dialog_for_user(owner, session_id)
        if (dialog.channel, dialog.chat_id) != (channel, chat_id):
            raise NotFoundError(f"no dialog {shown_ref(session_id)} in this chat")
        # Its background tasks are stopped by their worker's next heartbeat (``storage.tasks``).
        # Task rows before the dialog row: ``end_task`` locks them in that order too.
        dialog.tasks.filter(status=BackgroundTask.Status.RUNNING, stop_requested_at__isnull=True).update(
            stop_requested_at=now
        )
        Dialog.objects.filter(pk=dialog.pk).update(
            deleted_at=now,
            state_version=F("state_version") + 1,
            lease_epoch=F("lease_epoch") + 1,
            lease_owner=None,
            lease_expires_at=None,
        )
        dialog.deleted_at = now
        dropped = InboxMessage.objects.filter(dialog=dialog, status=InboxMessage.Status.QUEUED).update(
            status=InboxMessage.Status.DONE, finished_at=now, error=DELETED_DIALOG_ERROR
        )
        dialog.schedules.update(enabled=False, next_run_at=None, updated_at=now)  # none fires again
        running = bool(
            InboxMessage.objects.filter(dialog=dialog, status=InboxMessage.Status.STARTED).update(
                status=InboxMessage.Status.DONE,
                finished_at=now,
                error=DELETED_DIALOG_ERROR,
                notice_sent_at=now,
            )
        )
        state = ChatState.objects.filter(channel=channel, chat_id=chat_id).first()
        was_active = state is None or state.active_dialog_id in (None, dialog.pk)
        created = False
        if was_active:
            active = _most_recent_live(owner, channel, chat_id, exclude=dialog.pk)
            if active is None:
                active, created = _new_dialog(owner, channel, chat_id), True
            _set_active(channel, chat_id, owner, active)
        else:
            active = state.active_dialog
    return DeletedDialog(dialog, active, was_active, created, running, dropped)
