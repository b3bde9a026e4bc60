"""Turn checkpoints: what a running turn has shown, saved so that a dead process's turn keeps it.

A turn's rows commit in one transaction at its end (DESIGN §3), so a process killed mid-stream
leaves nothing but its user row. While a turn runs, its worker saves the answer and reasoning
text it has shown on the turn's inbox row (``InboxMessage.checkpoint``, at most once every
``PICOBOT_TURN_CHECKPOINT_SECONDS``: ``runtime.checkpoints``). When a takeover marks the turn
``interrupted`` (``turns.interrupt_started``), :func:`commit_checkpoint` commits that text as the
turn's assistant row with ``completion_status: interrupted``, in the same transaction.

Checkpoint shape (JSON)::

    {"text": str, "reasoning": str, "iteration": int, "revision": int, "at": int (ms)}

``text``/``reasoning`` are every answer / reasoning block the turn showed, in order, joined by a
blank line; ``iteration`` is the last one's. Tool calls and their results are not kept: they
commit only with the turn, and a call without its result would have to be invented.

No double answers: the committed row takes the turn's reserved ``reply_message_id`` (the id the
normal commit gives its last assistant row, ``runtime.turn_rows``), so the primary key refuses a
second one; a row whose turn already has that row commits nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection, transaction

from conversations.models import Dialog, InboxMessage, Message, now_ms
from conversations.storage import sql
from conversations.storage.shapes import scrub_text


@dataclass(frozen=True)
class CheckpointWrite:
    """One running turn's checkpoint, as its worker saves it.

    Attributes:
        dialog_id, epoch: the dialog and the lease epoch the writer holds.
        inbox_id: the turn's inbox row.
        checkpoint: the :mod:`checkpoint shape <conversations.storage.checkpoints>`.
    """

    dialog_id: str
    epoch: int
    inbox_id: str
    checkpoint: dict


def write_checkpoints(worker_id: str, writes: Iterable[CheckpointWrite]) -> int:
    """Save the checkpoints of a worker's running turns, all in ONE transaction (one write
    transaction per period, whatever the number of turns: SQLite has one writer).

    A checkpoint is written only where the row is still ``started`` and the dialog's lease is
    still ``(worker_id, epoch)`` (DESIGN §2: a stale owner writes nothing; a turn that ended or
    was taken over meanwhile keeps what its end wrote). One hand-written statement run for every
    turn (``executemany``; the ORM would compile an UPDATE per turn under the GIL the event loop
    needs, DESIGN §5). Returns how many rows were written.

    Raises:
        DatabaseError: the write failed (the caller logs it; the next period tries again).
    """
    statement = (
        f"UPDATE {sql.INBOX} SET checkpoint = %s WHERE id = %s AND status = %s AND dialog_id IN "
        f"(SELECT id FROM {sql.DIALOG} WHERE id = %s AND lease_owner = %s AND lease_epoch = %s)"
    )
    started = InboxMessage.Status.STARTED
    params = [
        [
            json.dumps(scrub_text(item.checkpoint), ensure_ascii=False),
            sql.uuid_param(item.inbox_id),
            started,
            item.dialog_id,
            worker_id,
            item.epoch,
        ]
        for item in writes
    ]
    if not params:
        return 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(statement, params)
        return max(cursor.rowcount, 0)


def commit_checkpoint(dialog: Dialog, row: InboxMessage) -> Message | None:
    """Commit an interrupted turn's checkpoint as its ``interrupted`` assistant row.

    Call inside the transaction that marks ``row`` interrupted, after the lease check. The row
    takes ``seq = history_revision + 1`` (the turn's user row is the last one: one turn runs at a
    time) and the reply id; the dialog's counters follow (``dialog`` is updated in memory too,
    for a second row of the same call). Returns the created row, or None when the checkpoint is
    empty or blank, the turn has no reply id, or its reply row already exists.
    """
    checkpoint = row.checkpoint if isinstance(row.checkpoint, dict) else {}
    text = str(checkpoint.get("text") or "")
    reasoning = str(checkpoint.get("reasoning") or "")
    if not (text.strip() or reasoning.strip()) or row.reply_message_id is None:
        return None
    if Message.objects.filter(pk=row.reply_message_id).exists():
        return None
    dialog.history_revision += 1
    message = Message.objects.create(
        id=row.reply_message_id,
        dialog=dialog,
        seq=dialog.history_revision,
        role=Message.Role.ASSISTANT,
        content=scrub_text(text if text.strip() else ""),
        reasoning_content=scrub_text(reasoning) or None,
        turn_id=row.turn_id,
        iteration=max(0, int(checkpoint.get("iteration") or 0)),
        completion_status=Message.CompletionStatus.INTERRUPTED,
        created_at=int(checkpoint.get("at") or now_ms()),
    )
    sql.execute(
        f"UPDATE {sql.DIALOG} SET history_revision = %s, total_message_count = total_message_count + 1, "
        "state_version = state_version + 1 WHERE id = %s",
        [dialog.history_revision, dialog.pk],
    )
    return message
