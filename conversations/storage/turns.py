"""Turn boundaries: start (user row enters history), commit (one transaction), abandon, interrupt."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from django.db import DatabaseError, transaction

from conversations.models import InboxMessage, Message, now_ms
from conversations.storage import sql
from conversations.storage.checkpoints import commit_checkpoint
from conversations.storage.lease import Takeover, check_lease, claim_lease
from conversations.storage.shapes import (
    TURN_INTERRUPTED_ERROR,
    CommitResult,
    HistorySnapshot,
    LeaseLostError,
    TurnStart,
    history_row_to_protocol,
    message_to_history_row,
    message_to_protocol,
    scrub_text,
    turn_outcome,
)


@dataclass(frozen=True)
class DialogClaim:
    """What ``claim_dialog`` took: the lease ``epoch`` and the turns it found ``interrupted``."""

    epoch: int
    interrupted: list[dict] | None  # None: not done (a storage error); the caller does it


def claim_dialog(
    dialog_id: str, worker_id: str, lease_ms: int, *, takeover: Takeover | None = None
) -> DialogClaim | None:
    """``claim_lease``, then ``interrupt_started`` under the new epoch: what a worker does before a
    dialog's first turn, in one storage call (one trip to the storage thread instead of two).

    Returns None when the lease is not ours to take (``claim_lease``).
    """
    epoch = claim_lease(dialog_id, worker_id, lease_ms, takeover=takeover)
    if epoch is None:
        return None
    try:
        interrupted = interrupt_started(dialog_id, worker_id, epoch)
    except DatabaseError:
        interrupted = None  # the executor tries again, and alerts the chat if it fails there too
    return DialogClaim(epoch, interrupted)


def interrupt_started(dialog_id: str, worker_id: str, epoch: int) -> list[dict]:
    """Mark inbox rows left ``started`` by a dead owner as ``interrupted`` (DESIGN §3).

    In the same transaction, a row's checkpoint (what the turn had shown as of its last save)
    becomes the turn's assistant row, ``completion_status: interrupted``
    (``checkpoints.commit_checkpoint``), and the checkpoint is cleared.

    Call right after ``claim_lease``. Returns ``[{turn_id, session_id, message_id, chat_id,
    channel, inbox_id}]`` so the caller can publish a terminal ``failed`` snapshot and a notice for
    each.
    """
    if not sql.has_inbox_rows(dialog_id, InboxMessage.Status.STARTED):
        return []  # the usual case: nothing to mark, so no write transaction (SQLite has one writer)
    with transaction.atomic():
        dialog = check_lease(dialog_id, worker_id, epoch)
        rows = list(
            InboxMessage.objects.filter(dialog=dialog, status=InboxMessage.Status.STARTED).order_by(
                "position"
            )
        )
        for row in rows:
            commit_checkpoint(dialog, row)
        InboxMessage.objects.filter(pk__in=[r.pk for r in rows]).update(
            status=InboxMessage.Status.INTERRUPTED,
            finished_at=now_ms(),
            error=TURN_INTERRUPTED_ERROR,
            outcome=InboxMessage.Outcome.FAILED,
            checkpoint=None,
        )
    return [
        {
            "turn_id": str(r.turn_id),
            "session_id": dialog.id,
            "message_id": str(r.reply_message_id),
            "chat_id": dialog.chat_id,
            "channel": dialog.channel,
            "inbox_id": str(r.pk),
        }
        for r in rows
        if r.turn_id
    ]


def interrupted_commit(inbox_id: str) -> CommitResult | None:
    """What an interrupted turn left in history, as its ``turn_committed``: its user row
    (committed when the turn started, with its ``interrupted`` outcome), then the answer its
    checkpoint kept (``interrupt_started``), if any; None when the user row is gone."""
    row = sql.history_row(inbox_id)
    if row is None:
        return None
    rows = [row]
    reply_id = InboxMessage.objects.filter(pk=inbox_id).values_list("reply_message_id", flat=True).first()
    reply = sql.history_row(str(reply_id)) if reply_id else None
    if reply is not None:
        rows.append(reply)
    outcome = turn_outcome(InboxMessage.Status.INTERRUPTED, "", "")
    session_id = Message.objects.filter(pk=row["id"]).values_list("dialog_id", flat=True).first() or ""
    return CommitResult(
        messages=[
            history_row_to_protocol(r, session_id=session_id, outcome=outcome if r is row else None)
            for r in rows
        ],
        history_revision=rows[-1]["seq"],
        history_rows=rows,
    )


def start_next_turn(
    dialog_id: str,
    worker_id: str,
    epoch: int,
    *,
    known_revision: int | None = None,
    known_summary_seq: int | None = None,
) -> TurnStart | None:
    """Start the dialog's oldest queued message: it enters history with the next ``seq``.

    ``known_revision``/``known_summary_seq``: what the caller's runtime session holds (seed 004
    §5). When its summary_seq is the dialog's and ``summary_seq <= known_revision <= the dialog's
    revision before this turn``, only the rows with ``seq > known_revision`` are read and returned
    (``history_is_delta``); otherwise (no session, a compaction happened, a revision the DB does
    not have) every row with ``seq > summary_seq`` is, as without a session.

    Returns None when nothing is queued (nothing read or written; checked before the write
    transaction, which SQLite gives one writer at a time). Raises LeaseLostError when the epoch
    is stale.
    """
    if not sql.has_inbox_rows(dialog_id, InboxMessage.Status.QUEUED):
        return None
    with transaction.atomic():
        dialog = check_lease(dialog_id, worker_id, epoch)
        row = sql.next_queued(dialog.pk)
        if row is None:
            return None
        now = now_ms()
        row.status = InboxMessage.Status.STARTED
        row.turn_id = uuid.uuid4()
        row.reply_message_id = uuid.uuid4()
        row.started_at = now
        sql.execute(
            f"UPDATE {sql.INBOX} SET status = %s, turn_id = %s, reply_message_id = %s, started_at = %s WHERE id = %s",
            [
                row.status,
                sql.uuid_param(row.turn_id),
                sql.uuid_param(row.reply_message_id),
                now,
                sql.uuid_param(row.id),
            ],
        )
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
        sql.execute(
            f"UPDATE {sql.DIALOG} SET history_revision = %s, message_count = message_count + 1, "
            "total_message_count = total_message_count + 1, last_active_at = %s, state_version = state_version + 1 "
            "WHERE id = %s",
            [seq, now, dialog.pk],
        )
        delta = (
            known_revision is not None
            and known_summary_seq == dialog.summary_seq
            and dialog.summary_seq <= known_revision <= dialog.history_revision
        )
        after = known_revision if delta else dialog.summary_seq
        history = sql.history_rows(dialog.pk, after)
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
        summary_seq=dialog.summary_seq,
        history_revision=seq,
        history_is_delta=delta,
        channel_context=row.channel_context or {},
        model=row.model or dialog.model,
        owner_id=dialog.owner_id,
        instructions=row.instructions,
    )


def load_history(dialog_id: str, worker_id: str, epoch: int) -> HistorySnapshot:
    """The dialog's full history state, for (re)building a runtime session (seed 004 §5.1, §6.3).

    Read in one transaction by the lease holder: rows with ``seq > summary_seq``, history form.
    Raises LeaseLostError when the epoch is stale.
    """
    with transaction.atomic():
        dialog = check_lease(dialog_id, worker_id, epoch)
        history = sql.history_rows(dialog.pk, dialog.summary_seq)
    return HistorySnapshot(
        dialog_id=dialog.id,
        title=dialog.title,
        summary=dialog.summary,
        summary_seq=dialog.summary_seq,
        history_revision=dialog.history_revision,
        history=history,
    )


def _as_stored(message: Message) -> dict:
    """The history form of a just-created row exactly as a later DB read returns it.

    JSON columns go through the same ``json.dumps``/``json.loads`` round trip as the database
    (tuples become lists, keys strings), and uuids take their canonical text.
    """
    row = message_to_history_row(message)
    for key in ("provider_state", "tool_calls", "media_refs"):
        row[key] = json.loads(json.dumps(row[key]))
    row["id"] = str(uuid.UUID(row["id"]))
    if row["turn_id"] is not None:
        row["turn_id"] = str(uuid.UUID(row["turn_id"]))
    return row


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
    outcome: str = "",
    model: str = "",
    lease_ms: int | None = None,
) -> CommitResult:
    """Commit a turn's assistant and tool rows in ONE transaction with the dialog counters.

    ``rows`` are dicts with Message field names (``id`` optional; ``seq`` assigned here, gap-free).
    The inbox row ends ``done`` (or ``inbox_status``) with ``outcome`` (the status its terminal
    snapshot shows: ``InboxMessage.Outcome``) and ``error`` (the text that snapshot shows, never a
    raw provider error). Returns the committed rows, including the user message that started the
    turn with its ``outcome`` (``turn_outcome``), in protocol form (for ``turn_committed``), and the rows
    created here in history form (``history_rows``, for the runtime session; seed 004 §5.2).
    ``model`` (when given) is the preset that answered, kept on the inbox row (issue 17).
    ``lease_ms`` (when given) renews the lease in the same transaction: a holder that just proved
    its epoch keeps the dialog that long (DESIGN §2).

    Raises:
        LeaseLostError: a stale owner; nothing is written.
    """
    with transaction.atomic():
        dialog = check_lease(dialog_id, worker_id, epoch)
        seq = dialog.history_revision
        created = []
        for data in rows:
            seq += 1
            created.append(Message(dialog=dialog, seq=seq, **scrub_text(data)))
        Message.objects.bulk_create(created)
        usage = usage or {}
        now = now_ms()
        optional = ["lease_expires_at = %s"] if lease_ms else []
        sql.execute(
            f"UPDATE {sql.DIALOG} SET {''.join(f'{column}, ' for column in optional)}history_revision = %s, "
            "total_message_count = total_message_count + %s, last_active_at = %s, state_version = state_version + 1, "
            "usage_input_tokens = usage_input_tokens + %s, usage_output_tokens = usage_output_tokens + %s WHERE id = %s",
            [
                *([now + lease_ms] if lease_ms else []),
                seq,
                len(created),
                now,
                int(usage.get("input_tokens") or 0),
                int(usage.get("output_tokens") or 0),
                dialog.pk,
            ],
        )
        error = scrub_text(error)
        sql.execute(
            f"UPDATE {sql.INBOX} SET status = %s, finished_at = %s, error = %s, outcome = %s, model = %s, "
            "checkpoint = NULL WHERE id = %s",
            [inbox_status, now, error, outcome, model[:64], sql.uuid_param(inbox_id)],
        )
        user_row = sql.history_row(inbox_id)
    shown = turn_outcome(inbox_status, outcome, error)
    committed = (
        [history_row_to_protocol(user_row, session_id=dialog.id, outcome=shown)] if user_row else []
    ) + [message_to_protocol(m) for m in created]
    return CommitResult(
        messages=committed, history_revision=seq, history_rows=[_as_stored(m) for m in created]
    )


def abandon_turn(dialog_id: str, worker_id: str, epoch: int, inbox_id: str, error: str) -> bool:
    """End a turn whose commit failed: its inbox row is ``done``, ``failed``, with ``error`` (the
    text its terminal snapshot shows: the user row's ``outcome``), nothing else.

    Without this the row would stay ``started`` and every new connection would see a phantom
    running turn until a restart. Returns False when the lease was lost (nothing written).
    """
    with transaction.atomic():
        try:
            check_lease(dialog_id, worker_id, epoch)
        except LeaseLostError:
            return False
        InboxMessage.objects.filter(pk=inbox_id, status=InboxMessage.Status.STARTED).update(
            status=InboxMessage.Status.DONE,
            finished_at=now_ms(),
            error=scrub_text(error)[:2000],
            outcome=InboxMessage.Outcome.FAILED,
            checkpoint=None,
        )
    return True
