"""Dialogs of the OpenAI-compatible endpoint (issue 18): one-request dialogs and named ones,
and how a request's turn ended.

A request without a dialog name runs in a dialog of its own: a chat of the endpoint's channel
that no listing shows (``sessions_page`` lists one chat), seeded with the request's earlier
messages as committed history and soft-deleted once its turn ended (``purge`` removes it later;
usage rows name it by id and stay). A named dialog is one of the user's WebUI chat, found by id
or title, or created with that title.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Q, Sum

from conversations.models import Dialog, InboxMessage, Message, UsageRecord, now_ms
from conversations.storage.dialogs import _new_dialog, clean_user_title, dialog_for_user
from conversations.storage.shapes import NotFoundError, message_to_protocol, scrub_text

REQUEST_DIALOG_TITLE = "OpenAI API request"
"""The title of a one-request dialog (given, so no automatic title is ever generated for it)."""

HISTORY_ROLES = ("user", "assistant")


def open_request_dialog(owner: Any, channel: str, chat_id: str, history: list[tuple[str, str]]) -> Dialog:
    """A new one-request dialog in chat ``(channel, chat_id)`` whose committed history is
    ``history`` — ``[(role, text)]``, role ``user`` or ``assistant``, oldest first — as seq 1…n.

    Never the chat's active dialog (no ``ChatState`` row). Raises ValueError for another role.
    """
    now = now_ms()
    with transaction.atomic():
        dialog = _new_dialog(owner, channel, chat_id, REQUEST_DIALOG_TITLE)
        rows = []
        for seq, (role, text) in enumerate(history, start=1):
            if role not in HISTORY_ROLES:
                raise ValueError(f"a history row's role must be user or assistant, not {role!r}")
            rows.append(
                Message(dialog=dialog, seq=seq, role=role, content=scrub_text(text), created_at=now + seq - 1)
            )
        Message.objects.bulk_create(rows)
        users = sum(1 for role, _ in history if role == "user")
        Dialog.objects.filter(pk=dialog.pk).update(
            history_revision=len(rows), message_count=users, total_message_count=len(rows)
        )
    return dialog


def named_dialog(owner: Any, channel: str, chat_id: str, name: str) -> tuple[Dialog, bool]:
    """``(dialog, created)``: the owner's live dialog of chat ``(channel, chat_id)`` that ``name``
    names — its unified id, its short id, else its exact title (the most recent one) — or a new
    one titled ``name`` (not made the chat's active dialog).

    Raises:
        NotFoundError: ``name`` is a unified id of no live dialog of the owner's in that chat.
        ValueError: ``name`` cannot be a title (``clean_user_title``).
    """
    name = name.strip()
    if name.startswith(f"{channel}:"):
        dialog = dialog_for_user(owner, name)
        if (dialog.channel, dialog.chat_id) != (channel, chat_id):
            raise NotFoundError("no such dialog in your chat")
        return dialog, False
    live = Dialog.objects.filter(channel=channel, chat_id=chat_id, owner=owner, deleted_at__isnull=True)
    title = " ".join(name.split())
    found = live.filter(Q(dialog_id=name) | Q(title=title)).order_by("-last_active_at").first()
    if found is not None:
        return found, False
    return _new_dialog(owner, channel, chat_id, clean_user_title(name)), True


def retire_request_dialog(dialog_id: str) -> bool:
    """Soft-delete a one-request dialog once nothing of it is queued or running; True when it is
    (now or already) deleted, False while its turn still runs (ask again later)."""
    with transaction.atomic():
        waiting = InboxMessage.objects.filter(
            dialog_id=dialog_id, status__in=[InboxMessage.Status.QUEUED, InboxMessage.Status.STARTED]
        ).exists()
        if waiting:
            return False
        Dialog.objects.filter(pk=dialog_id, deleted_at__isnull=True).update(deleted_at=now_ms())
    return True


WITHDRAWN_ERROR = "the client disconnected before its turn started"


def withdraw_queued(inbox_id: str) -> bool:
    """End inbox row ``inbox_id`` unrun (``done``, ``cancelled``) if it is still queued: its
    client left. True when it was withdrawn; False when its turn started or ended meanwhile."""
    return bool(
        InboxMessage.objects.filter(pk=inbox_id, status=InboxMessage.Status.QUEUED).update(
            status=InboxMessage.Status.DONE,
            outcome=InboxMessage.Outcome.CANCELLED,
            error=WITHDRAWN_ERROR,
            finished_at=now_ms(),
        )
    )


def request_turn(inbox_id: str) -> dict | None:
    """How the turn of inbox row ``inbox_id`` stands: ``{status, outcome, error, turn_id,
    dialog_id, rows}`` — ``status`` queued / started / done / interrupted; ``rows``: once it
    ended, the assistant and tool rows it committed (protocol form, ``seq`` order; [] before).
    None for an unknown row."""
    row = (
        InboxMessage.objects.filter(pk=inbox_id)
        .values("status", "outcome", "error", "turn_id", "dialog_id")
        .first()
    )
    if row is None:
        return None
    turn_id = str(row["turn_id"]) if row["turn_id"] is not None else None
    ended = row["status"] in (InboxMessage.Status.DONE, InboxMessage.Status.INTERRUPTED)
    rows = []
    if ended and turn_id is not None:
        rows = [
            message_to_protocol(m)
            for m in Message.objects.filter(dialog_id=row["dialog_id"], turn_id=turn_id)
            .exclude(role=Message.Role.USER)
            .order_by("seq")
        ]
    return {**row, "turn_id": turn_id, "rows": rows}


def turn_usage(turn_id: str) -> dict[str, int]:
    """``{input_tokens, output_tokens}`` of the usage rows written for ``turn_id`` so far."""
    sums = UsageRecord.objects.filter(turn_id=turn_id).aggregate(
        i=Sum("input_tokens"), o=Sum("output_tokens")
    )
    return {"input_tokens": int(sums["i"] or 0), "output_tokens": int(sums["o"] or 0)}
