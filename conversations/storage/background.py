"""Storage of background LLM work: title attempts and compaction summaries (seed 004 §5.4, §7).

Both read what the model needs in one short call, let the caller talk to the model with no DB
connection or lock held (DESIGN §2), and then commit with ONE conditional UPDATE that loses
quietly to whatever changed meanwhile: a user rename or delete beats a late generated title; a
compaction that committed first beats ours (seed 000 §12 step 4).
"""

from __future__ import annotations

from django.db.models import F

from conversations.models import ChatState, Dialog, Message
from conversations.storage.shapes import (
    NotFoundError,
    message_to_history_row,
    message_to_protocol,
    scrub_text,
)

# How many of a dialog's first user/assistant rows the title request may read.
TITLE_SOURCE_ROWS = 20
MAX_TITLE_LENGTH = 200  # Dialog.title's max_length


def title_candidate(dialog_id: str, after_n: int, on_first: bool) -> dict | None:
    """Claim a title attempt for the dialog if one is due; None when none is.

    Due when the dialog is live, its title is still the default, and either ``on_first`` and it
    has a user message and no attempt was made yet, or ``after_n > 0`` and ``after_n`` more user
    messages were committed since the last attempt (seed 004 §5.4: the 10th by default; a failed
    attempt is retried after another ``after_n``). The attempt is recorded
    (``title_attempted_at = message_count``) by a conditional UPDATE, so two workers or two turns
    never attempt the same count twice.

    Returns:
        ``{dialog_id, channel, chat_id, message_count, rows}``; ``rows`` are the first
        :data:`TITLE_SOURCE_ROWS` user/assistant rows, oldest first, in protocol form
        (``message_to_protocol``). Touches the DB.
    """
    # No wrapping transaction: it runs after every turn, and on SQLite an IMMEDIATE transaction
    # would take the write lock just to find that nothing is due. The claim is one statement.
    dialog = Dialog.objects.filter(pk=dialog_id, deleted_at__isnull=True, title_is_default=True).first()
    if dialog is None:
        return None
    count, attempted = dialog.message_count, dialog.title_attempted_at
    first_due = on_first and count >= 1 and attempted == 0
    nth_due = after_n > 0 and count >= attempted + after_n
    if not (first_due or nth_due):
        return None
    claimed = Dialog.objects.filter(
        pk=dialog_id, title_attempted_at=attempted, title_is_default=True, deleted_at__isnull=True
    ).update(title_attempted_at=count)
    if not claimed:
        return None  # another task claimed it, or the dialog was renamed or deleted meanwhile
    rows = Message.objects.filter(dialog=dialog, role__in=[Message.Role.USER, Message.Role.ASSISTANT])
    protocol_rows = [message_to_protocol(m) for m in rows.order_by("seq")[:TITLE_SOURCE_ROWS]]
    return {
        "dialog_id": dialog.id,
        "channel": dialog.channel,
        "chat_id": dialog.chat_id,
        "message_count": count,
        "rows": protocol_rows,
    }


def commit_generated_title(dialog_id: str, title: str) -> Dialog | None:
    """Store a generated title unless a user title or a delete got there first.

    One conditional UPDATE (``title_is_default`` and not deleted). The generated title is not a
    default any more (``title_is_default`` becomes False), so it is never generated over again,
    and a later user rename simply replaces it.

    Returns:
        The updated dialog, or None when the dialog was renamed, deleted or is unknown (the
        generated title is discarded). Touches the DB.
    """
    updated = Dialog.objects.filter(pk=dialog_id, title_is_default=True, deleted_at__isnull=True).update(
        title=scrub_text(title)[:MAX_TITLE_LENGTH],
        title_is_default=False,
        state_version=F("state_version") + 1,
    )
    if not updated:
        return None
    return Dialog.objects.filter(pk=dialog_id).first()


def is_active_dialog(channel: str, chat_id: str, dialog_id: str) -> bool:
    """Whether ``dialog_id`` is the chat's active dialog (``session_changed.active``). Touches the DB."""
    return ChatState.objects.filter(channel=channel, chat_id=chat_id, active_dialog_id=dialog_id).exists()


def compaction_source(dialog_id: str) -> dict:
    """What a compaction of the dialog starts from.

    Returns:
        ``{dialog_id, channel, chat_id, summary, summary_seq, history_revision, rows}``;
        ``rows`` are the history rows with ``seq > summary_seq``, oldest first, in history form
        (``message_to_history_row``; server only). Touches the DB.

    Raises:
        NotFoundError: the dialog is unknown or deleted.
    """
    dialog = Dialog.objects.filter(pk=dialog_id, deleted_at__isnull=True).first()
    if dialog is None:
        raise NotFoundError(f"no dialog {dialog_id!r}")
    rows = Message.objects.filter(dialog=dialog, seq__gt=dialog.summary_seq).order_by("seq")
    return {
        "dialog_id": dialog.id,
        "channel": dialog.channel,
        "chat_id": dialog.chat_id,
        "summary": dialog.summary,
        "summary_seq": dialog.summary_seq,
        "history_revision": dialog.history_revision,
        "rows": [message_to_history_row(m) for m in rows],
    }


def commit_summary(dialog_id: str, summary: str, covers_seq: int, expected_summary_seq: int) -> bool:
    """Make ``summary`` stand for the rows with ``seq <= covers_seq`` (seed 002 Task 6).

    One conditional UPDATE: only while ``summary_seq`` is still ``expected_summary_seq`` (no other
    compaction committed since the source was read), the dialog is live and ``covers_seq`` is
    committed history. Resets ``auto_compact_failures`` (DESIGN §6: a manual ``/compact`` re-arms
    automatic compaction). ``state_version`` is bumped like on every dialog change; a running turn
    stays valid (its input was built before, its rows come after ``covers_seq``). History rows are
    never deleted.

    Returns:
        True when committed, False when a concurrent compaction won. Touches the DB.

    Raises:
        ValueError: ``covers_seq`` does not move the summary forward.
        NotFoundError: the dialog was deleted (or purged) meanwhile.
    """
    if covers_seq <= expected_summary_seq:
        raise ValueError(
            f"covers_seq {covers_seq} must be above the current summary_seq {expected_summary_seq}"
        )
    updated = Dialog.objects.filter(
        pk=dialog_id,
        summary_seq=expected_summary_seq,
        deleted_at__isnull=True,
        history_revision__gte=covers_seq,
    ).update(
        summary=scrub_text(summary),
        summary_seq=covers_seq,
        auto_compact_failures=0,
        state_version=F("state_version") + 1,
    )
    if not updated and not Dialog.objects.filter(pk=dialog_id, deleted_at__isnull=True).exists():
        raise NotFoundError(f"dialog {dialog_id!r} was deleted")
    return bool(updated)
