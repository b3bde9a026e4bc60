"""Storage service functions: every transaction boundary of a dialog lives here (DESIGN §3).

All functions are synchronous and touch the DB; async callers go through
``conversations.storage.runner.run_storage`` (own thread pool, bounded retry). Callers outside use
the package namespace (``storage.commit_turn``), so a test can replace one function for every
outside caller. Modules, errors and the rules they keep: ``README.md``.
"""

from conversations.storage.background import (
    commit_generated_title,
    commit_summary,
    compaction_source,
    is_active_dialog,
    title_candidate,
)
from conversations.storage.checkpoints import CheckpointWrite, commit_checkpoint, write_checkpoints
from conversations.storage.claims import (
    STOP_REPEAT_MS,
    claim_compaction,
    note_stop_requested,
    release_compaction,
    repeated_stop,
)
from conversations.storage.dialog_reads import dialog_fields, dialog_info, history_page, list_sessions
from conversations.storage.dialogs import (
    MAX_TITLE_CHARS,
    DeletedDialog,
    ResolvedDialog,
    active_dialog,
    active_dialog_created,
    clean_user_title,
    create_dialog,
    delete_dialog,
    dialog_for_user,
    dialog_in_chat,
    rename_dialog,
    resolve_dialog,
    session_ttl_ms,
    switch_dialog,
)
from conversations.storage.inbox import accept_inbound, accept_message, dialogs_needing_work, running_inbox
from conversations.storage.lease import (
    Takeover,
    check_lease,
    claim_lease,
    lease_epochs,
    release_lease,
    renew_worker_leases,
)
from conversations.storage.media import message_image
from conversations.storage.notices import mark_notices_sent, pending_interrupted_notices
from conversations.storage.outcomes import turn_states
from conversations.storage.shapes import (
    DEFAULT_TITLE,
    TURN_INTERRUPTED_ERROR,
    AcceptedMessage,
    CommitResult,
    InboxFullError,
    LeaseLostError,
    NotFoundError,
    StorageError,
    TurnStart,
    dialog_summary,
    message_to_history_row,
    message_to_protocol,
    scrub_text,
    turn_outcome,
)
from conversations.storage.turns import (
    DialogClaim,
    abandon_turn,
    claim_dialog,
    commit_turn,
    interrupt_started,
    interrupted_commit,
    load_history,
    start_next_turn,
)

__all__ = [
    "CheckpointWrite",
    "commit_checkpoint",
    "write_checkpoints",
    "STOP_REPEAT_MS",
    "claim_compaction",
    "note_stop_requested",
    "release_compaction",
    "repeated_stop",
    "DEFAULT_TITLE",
    "MAX_TITLE_CHARS",
    "DeletedDialog",
    "ResolvedDialog",
    "accept_inbound",
    "active_dialog_created",
    "clean_user_title",
    "delete_dialog",
    "dialog_in_chat",
    "dialog_info",
    "rename_dialog",
    "resolve_dialog",
    "session_ttl_ms",
    "AcceptedMessage",
    "CommitResult",
    "DialogClaim",
    "InboxFullError",
    "LeaseLostError",
    "Takeover",
    "NotFoundError",
    "StorageError",
    "TURN_INTERRUPTED_ERROR",
    "TurnStart",
    "abandon_turn",
    "accept_message",
    "active_dialog",
    "check_lease",
    "claim_dialog",
    "claim_lease",
    "commit_generated_title",
    "commit_summary",
    "commit_turn",
    "compaction_source",
    "create_dialog",
    "dialog_fields",
    "dialog_for_user",
    "dialog_summary",
    "dialogs_needing_work",
    "history_page",
    "interrupt_started",
    "interrupted_commit",
    "is_active_dialog",
    "list_sessions",
    "load_history",
    "mark_notices_sent",
    "message_image",
    "message_to_history_row",
    "message_to_protocol",
    "pending_interrupted_notices",
    "release_lease",
    "renew_worker_leases",
    "lease_epochs",
    "running_inbox",
    "turn_outcome",
    "turn_states",
    "scrub_text",
    "start_next_turn",
    "switch_dialog",
    "title_candidate",
]
