"""How turns ended, read back for connections that missed the news (PROTOCOL §1 "Convergence"),
and for history pages (a user row's ``outcome``).

The channel layer may drop any message (DESIGN §2), a turn's terminal snapshot and its
``turn_committed`` included. What they said is durable: the inbox row's ``status``, ``outcome``
and ``error``, and the turn's history rows. ``turn_states`` reads exactly that for the turns a
connection watches, so the connection can send what it missed (``conversations.chat.reconcile``);
``user_outcomes`` reads it for the user rows of a history page.
"""

from __future__ import annotations

import uuid

from django.db.models import Q

from conversations.models import InboxMessage, Message
from conversations.storage.media import media_types, without_media_data
from conversations.storage.shapes import message_to_protocol, turn_outcome

ENDED = (InboxMessage.Status.DONE, InboxMessage.Status.INTERRUPTED)


def _uuids(values: list[str]) -> list[uuid.UUID]:
    ids = []
    for value in values:
        try:
            ids.append(uuid.UUID(str(value)))
        except ValueError:
            continue
    return ids


def user_outcomes(message_ids: list[uuid.UUID | str]) -> dict[str, dict | None]:
    """``{user message id: turn_outcome(...)}`` for user rows (a user row's id is its inbox row's).

    One query on the inbox's primary key, whatever the number of ids; ids without an inbox row
    (imported dialogs) are left out. Read-only.
    """
    if not message_ids:
        return {}
    rows = InboxMessage.objects.filter(pk__in=message_ids).values_list("pk", "status", "outcome", "error")
    return {str(pk): turn_outcome(status, outcome, error) for pk, status, outcome, error in rows}


def turn_states(channel: str, chat_id: str, inbox_ids: list[str], turn_ids: list[str]) -> list[dict]:
    """The state of the chat's inbox rows named by inbox id or turn id.

    Returns one dict per row found (rows of other chats and unknown ids are left out)::

        {"inbox_id", "turn_id" (None while queued), "session_id", "message_id", "status",
         "outcome", "error", "gone" (its dialog was deleted, or it ended without a turn: nothing
         to send), "messages" (ended turns only: their history rows in protocol form,
         the user row first with its ``outcome``, ``seq`` order), "history_revision" (ended: the
         highest seq of those rows)}

    One query when nothing ended, two more per ended turn. Read-only.
    """
    inbox, turns = _uuids(inbox_ids), _uuids(turn_ids)
    if not inbox and not turns:
        return []
    rows = InboxMessage.objects.filter(
        Q(pk__in=inbox) | Q(turn_id__in=turns), dialog__channel=channel, dialog__chat_id=chat_id
    ).values(
        "pk", "turn_id", "dialog_id", "reply_message_id", "status", "outcome", "error", "dialog__deleted_at"
    )
    states = []
    for row in rows:
        state = {
            "inbox_id": str(row["pk"]),
            "turn_id": str(row["turn_id"]) if row["turn_id"] else None,
            "session_id": row["dialog_id"],
            "message_id": str(row["reply_message_id"]) if row["reply_message_id"] else None,
            "status": row["status"],
            "outcome": row["outcome"],
            "error": row["error"],
            # Nothing to send for these: a deleted dialog's turns end without a terminal frame
            # (PROTOCOL /delete), and a message dropped before its turn started has no turn.
            "gone": row["dialog__deleted_at"] is not None or (row["status"] in ENDED and not row["turn_id"]),
        }
        if row["status"] in ENDED and row["turn_id"] and not state["gone"]:
            outcome = turn_outcome(row["status"], row["outcome"], row["error"])
            state["messages"] = _turn_messages(row["dialog_id"], row["pk"], row["turn_id"], outcome)
            state["history_revision"] = max((m["seq"] for m in state["messages"]), default=0)
        states.append(state)
    return states


def _turn_messages(
    dialog_id: str, inbox_id: uuid.UUID, turn_id: uuid.UUID, outcome: dict | None
) -> list[dict]:
    """The turn's rows: its user row (id = the inbox id, with ``outcome``) and what its commit
    added after it.

    A dialog runs one turn at a time, so they are contiguous from the user row's ``seq``: the
    read is a short range scan on the ``(dialog, seq)`` index.
    """
    user_seq = Message.objects.filter(pk=inbox_id, dialog_id=dialog_id).values_list("seq", flat=True).first()
    if user_seq is None:
        return []
    rows = without_media_data(
        Message.objects.filter(dialog_id=dialog_id, seq__gte=user_seq, turn_id=turn_id).order_by("seq")
    )
    return [message_to_protocol(m, outcome=outcome, media_types=media_types(m)) for m in rows]
