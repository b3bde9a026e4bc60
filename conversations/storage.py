"""Storage service functions: every transaction boundary of a dialog lives here (DESIGN §3).

All functions are synchronous and touch the DB; async callers go through
``conversations.storage_runner.run_storage`` (own thread pool, bounded retry). Persist first,
notify later: nothing here talks to the channel layer.

Errors: ``NotFoundError`` (unknown or foreign dialog — answer 404 / ``not_found``),
``InboxFullError`` (the dialog already has ``INBOX_CAPACITY`` queued messages), ``LeaseLostError``
(a stale owner tried to write; its turn must stop without publishing).
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q

from conversations.models import ChatState, Dialog, InboxMessage, Message, now_ms

DEFAULT_TITLE = "New chat"


class StorageError(Exception):
    """Base of the storage errors callers act on."""


class NotFoundError(StorageError):
    """The dialog does not exist, is deleted, or belongs to someone else."""


class InboxFullError(StorageError):
    """The dialog's inbox holds the maximum number of queued messages (seed 000 §6: 32)."""


class LeaseLostError(StorageError):
    """This worker no longer owns the dialog's lease (its epoch is stale; DESIGN §2)."""


# --- shapes ---------------------------------------------------------------------------------------


def scrub_nul(value: Any) -> Any:
    """``value`` with NUL characters replaced by U+FFFD, in strings nested in dicts and lists.

    PostgreSQL text and jsonb cannot store ``\x00``; a model or a user that sends one must not
    make a write fail (and lose the turn). SQLite would take it, but both databases store the same.
    """
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {scrub_nul(k): scrub_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_nul(v) for v in value]
    return value



def _protocol_tool_call(call: object) -> object:
    # ``raw_arguments`` (invalid argument text kept for the model) is server-only: clients get
    # PROTOCOL's ``{id, name, arguments: {…}}``.
    if isinstance(call, dict) and "raw_arguments" in call:
        return {k: v for k, v in call.items() if k != "raw_arguments"}
    return call


def message_to_protocol(row: Message) -> dict:
    """A history row as PROTOCOL §1 "History message" (``provider_state`` and a tool call's
    ``raw_arguments`` never leave)."""
    return {
        "id": str(row.id),
        "seq": row.seq,
        "role": row.role,
        "content": row.content,
        "reasoning": row.reasoning_content,
        "tool_calls": [_protocol_tool_call(c) for c in row.tool_calls or []],
        "tool_call_id": row.tool_call_id,
        "tool_name": row.tool_name,
        "is_error": row.is_error,
        "turn_id": str(row.turn_id) if row.turn_id else None,
        "iteration": row.iteration,
        "completion_status": row.completion_status,
        "created_at": row.created_at,
    }


def message_to_history_row(row: Message) -> dict:
    """A history row for building provider input (includes ``provider_state``; server only)."""
    data = message_to_protocol(row)
    data["provider_state"] = row.provider_state
    data["tool_calls"] = row.tool_calls or []  # with ``raw_arguments``
    data["media_refs"] = row.media_refs or []
    return data


def dialog_summary(dialog: Dialog, active_id: str | None) -> dict:
    """One ``sessions`` item (PROTOCOL §1)."""
    return {
        "session_id": dialog.id,
        "dialog_id": dialog.dialog_id,
        "title": dialog.title,
        "last_active_at": dialog.last_active_at,
        "message_count": dialog.message_count,
        "active": dialog.id == active_id,
    }


@dataclass(frozen=True)
class AcceptedMessage:
    """Result of ``accept_message``: what the ``ack`` frame says."""

    inbox_id: str
    session_id: str
    queued: int
    duplicate: bool


@dataclass
class TurnStart:
    """A turn that just started: its inbox row moved into history (DESIGN §3)."""

    dialog_id: str
    channel: str
    chat_id: str
    title: str
    inbox_id: str
    turn_id: str
    reply_message_id: str
    user_message: dict
    history: list[dict] = field(default_factory=list)
    summary: str = ""


@dataclass(frozen=True)
class CommitResult:
    """Rows a turn committed (protocol form, ``seq`` order) and the new ``history_revision``."""

    messages: list[dict]
    history_revision: int


# --- dialogs and chats ----------------------------------------------------------------------------


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


# --- inbox ----------------------------------------------------------------------------------------


def _queued_ahead(dialog_id: str, position: int) -> int:
    return InboxMessage.objects.filter(
        dialog_id=dialog_id,
        position__lt=position,
        status__in=[InboxMessage.Status.QUEUED, InboxMessage.Status.STARTED],
    ).count()


def accept_message(
    owner: Any,
    channel: str,
    chat_id: str,
    content: str,
    *,
    session_id: str | None = None,
    client_msg_id: str | None = None,
    media: list | None = None,
    received_at: int | None = None,
    source: dict | None = None,
) -> AcceptedMessage:
    """Durably accept a user message into its dialog's inbox (the ``ack`` point, DESIGN §5).

    The dialog is ``session_id`` (which must be the owner's) or the chat's active dialog. A
    repeated ``client_msg_id`` returns the existing row with ``duplicate=True`` and creates nothing.

    Raises:
        NotFoundError: ``session_id`` is unknown, deleted or foreign.
        InboxFullError: the dialog already has ``INBOX_CAPACITY`` queued messages.
    """
    client_msg_id, content, source = scrub_nul(client_msg_id), scrub_nul(content), scrub_nul(source)
    if client_msg_id:
        existing = InboxMessage.objects.filter(user=owner, client_msg_id=client_msg_id).first()
        if existing is not None:
            return AcceptedMessage(
                str(existing.id), existing.dialog_id, _queued_ahead(existing.dialog_id, existing.position), True
            )
    dialog = dialog_for_user(owner, session_id) if session_id else active_dialog(owner, channel, chat_id)
    capacity = int(settings.PICOBOT["INBOX_CAPACITY"])
    try:
        with transaction.atomic():
            # Bump the position first: the UPDATE locks the dialog row, so concurrent sends count
            # the queue one after the other (on PostgreSQL both could otherwise see 31 and both
            # insert). Raising rolls the bump back.
            Dialog.objects.filter(pk=dialog.pk).update(inbox_position=F("inbox_position") + 1)
            queued = InboxMessage.objects.filter(dialog=dialog, status=InboxMessage.Status.QUEUED).count()
            if queued >= capacity:
                raise InboxFullError(f"the dialog already has {queued} queued messages")
            position = Dialog.objects.values_list("inbox_position", flat=True).get(pk=dialog.pk)
            row = InboxMessage.objects.create(
                user=owner,
                dialog=dialog,
                position=position,
                client_msg_id=client_msg_id or None,
                content=content,
                media=media or [],
                received_at=received_at or now_ms(),
                source=source or {},
            )
    except IntegrityError:
        # A concurrent send with the same client_msg_id won the race: answer with its row.
        if not client_msg_id:
            raise
        existing = InboxMessage.objects.get(user=owner, client_msg_id=client_msg_id)
        return AcceptedMessage(
            str(existing.id), existing.dialog_id, _queued_ahead(existing.dialog_id, existing.position), True
        )
    return AcceptedMessage(str(row.id), dialog.id, _queued_ahead(dialog.id, position), False)


def running_inbox(channel: str, chat_id: str) -> list[dict]:
    """Started turns of a chat: ``[{turn_id, session_id, message_id}]`` (for ``ready.running``)."""
    rows = InboxMessage.objects.filter(
        dialog__channel=channel, dialog__chat_id=chat_id, status=InboxMessage.Status.STARTED
    ).values_list("turn_id", "dialog_id", "reply_message_id")
    return [
        {"turn_id": str(t), "session_id": d, "message_id": str(r)} for t, d, r in rows if t is not None
    ]


def dialogs_needing_work(worker_id: str, limit: int = 100) -> list[str]:
    """Dialogs with queued or orphaned started inbox rows whose lease is free, expired or ours."""
    now = now_ms()
    ids = (
        InboxMessage.objects.filter(status__in=[InboxMessage.Status.QUEUED, InboxMessage.Status.STARTED])
        .filter(
            Q(dialog__lease_owner__isnull=True)
            | Q(dialog__lease_expires_at__lt=now)
            | Q(dialog__lease_owner=worker_id)
        )
        .values_list("dialog_id", flat=True)
        .distinct()[:limit]
    )
    return list(ids)


# --- lease (DESIGN §2) ----------------------------------------------------------------------------


def claim_lease(dialog_id: str, worker_id: str, lease_ms: int) -> int | None:
    """Take the dialog's lease if it is free, expired or already ``worker_id``'s.

    Returns the new epoch (every claim bumps it, so an older holder's writes are refused), or
    None when another live worker holds it. One conditional UPDATE: atomic on SQLite and
    PostgreSQL alike.
    """
    now = now_ms()
    with transaction.atomic():
        updated = (
            Dialog.objects.filter(pk=dialog_id)
            .filter(Q(lease_owner__isnull=True) | Q(lease_owner=worker_id) | Q(lease_expires_at__lt=now))
            .update(lease_owner=worker_id, lease_epoch=F("lease_epoch") + 1, lease_expires_at=now + lease_ms)
        )
        if not updated:
            return None
        return Dialog.objects.values_list("lease_epoch", flat=True).get(pk=dialog_id)


def renew_lease(dialog_id: str, worker_id: str, epoch: int, lease_ms: int) -> bool:
    """Extend a held lease; False when it was lost (another worker claimed it)."""
    return bool(
        Dialog.objects.filter(pk=dialog_id, lease_owner=worker_id, lease_epoch=epoch).update(
            lease_expires_at=now_ms() + lease_ms
        )
    )


def release_lease(dialog_id: str, worker_id: str, epoch: int) -> bool:
    """Give the lease up (the dialog went idle); False when it was no longer ours."""
    return bool(
        Dialog.objects.filter(pk=dialog_id, lease_owner=worker_id, lease_epoch=epoch).update(
            lease_owner=None, lease_expires_at=None
        )
    )


def _check_lease(dialog_id: str, worker_id: str, epoch: int) -> Dialog:
    dialog = Dialog.objects.select_for_update().filter(pk=dialog_id).first()
    if dialog is None or dialog.lease_owner != worker_id or dialog.lease_epoch != epoch:
        raise LeaseLostError(f"lease of {dialog_id} lost (epoch {epoch})")
    return dialog


def interrupt_started(dialog_id: str, worker_id: str, epoch: int) -> list[dict]:
    """Mark inbox rows left ``started`` by a dead owner as ``interrupted`` (DESIGN §3).

    Call right after ``claim_lease``. Returns ``[{turn_id, session_id, message_id, chat_id}]`` so
    the caller can publish a terminal ``failed`` snapshot and a notice for each.
    """
    with transaction.atomic():
        dialog = _check_lease(dialog_id, worker_id, epoch)
        rows = list(InboxMessage.objects.filter(dialog=dialog, status=InboxMessage.Status.STARTED))
        InboxMessage.objects.filter(pk__in=[r.pk for r in rows]).update(
            status=InboxMessage.Status.INTERRUPTED, finished_at=now_ms(), error="interrupted by a restart"
        )
    return [
        {
            "turn_id": str(r.turn_id),
            "session_id": dialog.id,
            "message_id": str(r.reply_message_id),
            "chat_id": dialog.chat_id,
            "channel": dialog.channel,
        }
        for r in rows
        if r.turn_id
    ]


# --- turns ----------------------------------------------------------------------------------------


def start_next_turn(dialog_id: str, worker_id: str, epoch: int) -> TurnStart | None:
    """Start the dialog's oldest queued message: it enters history with the next ``seq``.

    Returns None when nothing is queued. Raises LeaseLostError when the epoch is stale.
    """
    with transaction.atomic():
        dialog = _check_lease(dialog_id, worker_id, epoch)
        row = (
            InboxMessage.objects.filter(dialog=dialog, status=InboxMessage.Status.QUEUED)
            .order_by("position")
            .first()
        )
        if row is None:
            return None
        now = now_ms()
        row.status = InboxMessage.Status.STARTED
        row.turn_id = uuid.uuid4()
        row.reply_message_id = uuid.uuid4()
        row.started_at = now
        row.save(update_fields=["status", "turn_id", "reply_message_id", "started_at"])
        seq = dialog.history_revision + 1
        user_row = Message.objects.create(
            id=row.id,
            dialog=dialog,
            seq=seq,
            role=Message.Role.USER,
            content=row.content,
            media_refs=row.media,
            turn_id=row.turn_id,
            source=row.source,
            created_at=row.received_at,
        )
        Dialog.objects.filter(pk=dialog.pk).update(
            history_revision=seq,
            message_count=F("message_count") + 1,
            total_message_count=F("total_message_count") + 1,
            last_active_at=now,
            state_version=F("state_version") + 1,
        )
        history = [
            message_to_history_row(m)
            for m in Message.objects.filter(dialog=dialog, seq__gt=dialog.summary_seq).order_by("seq")
        ]
    return TurnStart(
        dialog_id=dialog.id,
        channel=dialog.channel,
        chat_id=dialog.chat_id,
        title=dialog.title,
        inbox_id=str(row.id),
        turn_id=str(row.turn_id),
        reply_message_id=str(row.reply_message_id),
        user_message=message_to_protocol(user_row),
        history=history,
        summary=dialog.summary,
    )


def commit_turn(
    dialog_id: str,
    worker_id: str,
    epoch: int,
    inbox_id: str,
    rows: list[dict],
    *,
    usage: dict | None = None,
    inbox_status: str = InboxMessage.Status.DONE,
    error: str = "",
) -> CommitResult:
    """Commit a turn's assistant and tool rows in ONE transaction with the dialog counters.

    ``rows`` are dicts with Message field names (``id`` optional; ``seq`` assigned here, gap-free).
    The inbox row ends ``done`` (or ``inbox_status``). Returns the committed rows, including the
    user message that started the turn, in protocol form (for ``turn_committed``).

    Raises:
        LeaseLostError: a stale owner; nothing is written.
    """
    with transaction.atomic():
        dialog = _check_lease(dialog_id, worker_id, epoch)
        seq = dialog.history_revision
        created = []
        for data in rows:
            seq += 1
            created.append(Message(dialog=dialog, seq=seq, **scrub_nul(data)))
        Message.objects.bulk_create(created)
        usage = usage or {}
        Dialog.objects.filter(pk=dialog.pk).update(
            history_revision=seq,
            total_message_count=F("total_message_count") + len(created),
            last_active_at=now_ms(),
            state_version=F("state_version") + 1,
            usage_input_tokens=F("usage_input_tokens") + int(usage.get("input_tokens") or 0),
            usage_output_tokens=F("usage_output_tokens") + int(usage.get("output_tokens") or 0),
        )
        InboxMessage.objects.filter(pk=inbox_id).update(
            status=inbox_status, finished_at=now_ms(), error=scrub_nul(error)
        )
        user_row = Message.objects.filter(pk=inbox_id).first()
    committed = ([message_to_protocol(user_row)] if user_row else []) + [message_to_protocol(m) for m in created]
    return CommitResult(messages=committed, history_revision=seq)


def abandon_turn(dialog_id: str, worker_id: str, epoch: int, inbox_id: str, error: str) -> bool:
    """End a turn whose commit failed: its inbox row is ``done`` with the error, nothing else.

    Without this the row would stay ``started`` and every new connection would see a phantom
    running turn until a restart. Returns False when the lease was lost (nothing written).
    """
    with transaction.atomic():
        try:
            _check_lease(dialog_id, worker_id, epoch)
        except LeaseLostError:
            return False
        InboxMessage.objects.filter(pk=inbox_id, status=InboxMessage.Status.STARTED).update(
            status=InboxMessage.Status.DONE, finished_at=now_ms(), error=scrub_nul(error)[:2000]
        )
    return True
