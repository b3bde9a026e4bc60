"""Persistent rows of PicoBot (DESIGN §3; seed 004 §4, seed 003 §15, seed 000 §10–§11).

All times are integer milliseconds since the Unix epoch (the protocol's unit), stored in
``BigIntegerField``s. ``Dialog`` is the seeds' "session" row; the runtime object is ``Session``.
"""

from __future__ import annotations

import hashlib
import time
import uuid

from django.conf import settings
from django.db import models


def now_ms() -> int:
    """Current wall-clock time in ms since the Unix epoch."""
    return time.time_ns() // 1_000_000


class Dialog(models.Model):
    """One conversation. ``id`` is the unified id ``"{channel}:{chat_id}:{dialog_id}"``.

    Counters: ``message_count`` counts user messages, ``total_message_count`` all history rows,
    ``history_revision`` is the highest committed ``seq`` (seed 000 §11). The lease columns make
    per-dialog execution serial across processes (DESIGN §2): every state write of a turn checks
    ``lease_epoch``. ``deleted_at`` is the soft delete of ``/delete``.
    """

    id = models.CharField(primary_key=True, max_length=255)
    channel = models.CharField(max_length=32)
    chat_id = models.CharField(max_length=128)
    dialog_id = models.CharField(max_length=64)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="dialogs"
    )
    title = models.CharField(max_length=200, default="New chat")
    title_is_default = models.BooleanField(default=True)
    created_at = models.BigIntegerField(default=now_ms)
    last_active_at = models.BigIntegerField(default=now_ms, db_index=True)
    message_count = models.PositiveIntegerField(default=0)
    total_message_count = models.PositiveIntegerField(default=0)
    state_version = models.PositiveBigIntegerField(default=0)
    history_revision = models.PositiveBigIntegerField(default=0)
    usage_input_tokens = models.PositiveBigIntegerField(default=0)
    usage_output_tokens = models.PositiveBigIntegerField(default=0)
    # The model preset the dialog's turns use (``/model NAME``, issue 17); "" is the default preset,
    # and a name the operator removed counts as the default too (``runtime.provider.preset_for``).
    model = models.CharField(max_length=200, blank=True, default="")
    # Lease (DESIGN §2).
    lease_owner = models.CharField(max_length=200, null=True, blank=True, db_index=True)
    lease_epoch = models.PositiveBigIntegerField(default=0)
    lease_expires_at = models.BigIntegerField(null=True, blank=True)
    # Compaction (seed 002 Task 6): the summary replaces history rows with seq <= summary_seq.
    summary = models.TextField(blank=True, default="")
    summary_seq = models.PositiveBigIntegerField(default=0)
    auto_compact_failures = models.PositiveSmallIntegerField(default=0)
    # A manual compaction (/compact, REST) claimed by some server process at this time (ms): one
    # summary call per dialog at a time across every process; a stale claim expires.
    compaction_claimed_at = models.BigIntegerField(null=True, blank=True)
    # Titles (seed 004 §5.4): the message_count at the last automatic title attempt.
    title_attempted_at = models.PositiveIntegerField(default=0)
    deleted_at = models.BigIntegerField(null=True, blank=True)
    inbox_position = models.PositiveBigIntegerField(default=0, help_text="last InboxMessage.position")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["channel", "chat_id", "dialog_id"], name="dialog_unified_id"),
        ]
        indexes = [models.Index(fields=["channel", "chat_id", "last_active_at"])]

    def __str__(self) -> str:
        return f"{self.title} ({self.id})"

    @staticmethod
    def unified_id(channel: str, chat_id: str, dialog_id: str) -> str:
        """``"{channel}:{chat_id}:{dialog_id}"`` (seed 004 §3)."""
        return f"{channel}:{chat_id}:{dialog_id}"


class ChatState(models.Model):
    """Per ``(channel, chat_id)``: the active dialog (what ``/switch`` changes)."""

    channel = models.CharField(max_length=32)
    chat_id = models.CharField(max_length=128)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE)
    active_dialog = models.ForeignKey(
        Dialog, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.BigIntegerField(default=now_ms)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["channel", "chat_id"], name="chat_state_unique")]

    def __str__(self) -> str:
        return f"{self.channel}:{self.chat_id}"


class InboxMessage(models.Model):
    """An accepted user message waiting for, running in, or done with its turn (DESIGN §3).

    The ``ack`` means this row exists. ``id`` becomes the id of the user's history ``Message`` when
    the turn starts; ``reply_message_id`` is the id pre-allocated for the turn's final assistant
    message (seed 003 §6.3). ``client_msg_id`` is unique per user (idempotent sends).
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        STARTED = "started"
        DONE = "done"
        INTERRUPTED = "interrupted"

    class Outcome(models.TextChoices):
        COMPLETED = "completed"
        CANCELLED = "cancelled"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE)
    dialog = models.ForeignKey(Dialog, on_delete=models.CASCADE, related_name="inbox")
    # Arrival order within the dialog (1, 2, …): turns run in this order.
    position = models.PositiveBigIntegerField()
    client_msg_id = models.CharField(max_length=64, null=True, blank=True)
    content = models.TextField()
    media = models.JSONField(default=list, blank=True)
    received_at = models.BigIntegerField(default=now_ms)
    source = models.JSONField(default=dict, blank=True)
    # The platform's opaque context (seed 000 §10.1): passed to the turn's sink, never interpreted.
    channel_context = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    turn_id = models.UUIDField(null=True, blank=True, db_index=True)
    reply_message_id = models.UUIDField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    # How the turn ended, as its terminal snapshot showed it: completed / cancelled / failed ("" while
    # it runs, and for rows older than this column). With the turn's rows it rebuilds the terminal
    # snapshot for a connection whose copy the channel layer dropped (``conversations.chat.reconcile``).
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True, default="")
    started_at = models.BigIntegerField(null=True, blank=True)
    finished_at = models.BigIntegerField(null=True, blank=True)
    # An ``interrupted`` row's notice reached a connecting client (sent again on ``ready`` until then).
    notice_sent_at = models.BigIntegerField(null=True, blank=True)
    # When a client last asked to stop this row's turn (ms): a repeat of that stop after the turn
    # ended is answered, never applied to the next turn — whichever server process receives it.
    stop_requested_at = models.BigIntegerField(null=True, blank=True)
    # What the running turn has shown so far, saved every ``PICOBOT_TURN_CHECKPOINT_SECONDS``:
    # ``{text, reasoning, iteration, revision, at}``; a takeover commits it as the turn's
    # ``interrupted`` answer (``storage.checkpoints``). Cleared when the turn ends.
    checkpoint = models.JSONField(null=True, blank=True)
    # While queued: the preset the turn must use ("" = the dialog's; the OpenAI-compatible endpoint
    # sets it per request, issue 18). Once run: the preset that answered (after any fallback; issue 17).
    model = models.CharField(max_length=64, blank=True, default="")
    # Extra system instructions for this turn only (an OpenAI request's system messages, issue 18):
    # appended to the system prompt of the turn's requests, never stored in history.
    instructions = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "client_msg_id"],
                condition=models.Q(client_msg_id__isnull=False),
                name="inbox_client_msg_id_per_user",
            ),
            models.UniqueConstraint(fields=["dialog", "position"], name="inbox_position_per_dialog"),
        ]
        indexes = [models.Index(fields=["dialog", "status", "position"]), models.Index(fields=["status"])]

    def __str__(self) -> str:
        return f"inbox {self.id} ({self.status})"


class Message(models.Model):
    """One committed history row (seed 003 §15, seed 004 §4). ``seq`` is gap-free per dialog.

    ``provider_state`` holds provider replay data (the producing endpoint, signatures, redacted
    thinking, the block layout) and never leaves the server. ``tool_calls`` is a list of
    ``{id, name, arguments}``, plus ``raw_arguments`` (server only) when the model's argument
    text was not a JSON object (``arguments`` is then ``{}``).
    """

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"

    class CompletionStatus(models.TextChoices):
        COMPLETED = "completed"
        CANCELLED = "cancelled"
        INTERRUPTED = "interrupted"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    dialog = models.ForeignKey(Dialog, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveBigIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True, default="")
    reasoning_content = models.TextField(null=True, blank=True)
    provider_state = models.JSONField(null=True, blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    # Text, not CharField: ids and names come from the model, and a long one must not make the
    # whole turn unsavable on PostgreSQL (SQLite would not notice).
    tool_call_id = models.TextField(null=True, blank=True)
    tool_name = models.TextField(null=True, blank=True)
    is_error = models.BooleanField(default=False)
    media_refs = models.JSONField(default=list, blank=True)
    turn_id = models.UUIDField(null=True, blank=True)
    iteration = models.PositiveIntegerField(default=0)
    completion_status = models.CharField(
        max_length=16, choices=CompletionStatus.choices, default=CompletionStatus.COMPLETED
    )
    # An assistant row whose response stopped at the provider's output limit (PROTOCOL §1
    # "History message"): its answer is cut off even though the turn completed.
    truncated = models.BooleanField(default=False)
    source = models.JSONField(default=dict, blank=True)
    created_at = models.BigIntegerField(default=now_ms)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["dialog", "seq"], name="message_seq_per_dialog")]
        indexes = [models.Index(fields=["dialog", "seq"])]
        ordering = ["dialog", "seq"]

    def __str__(self) -> str:
        return f"{self.dialog_id}#{self.seq} {self.role}"


class ApiToken(models.Model):
    """A per-user API token (DESIGN §9). Only a SHA-256 hash and a display prefix are stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True, default="")
    prefix = models.CharField(max_length=16, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.BigIntegerField(default=now_ms)
    last_used_at = models.BigIntegerField(null=True, blank=True)
    revoked_at = models.BigIntegerField(null=True, blank=True)
    expires_at = models.BigIntegerField(null=True, blank=True)
    """Epoch ms after which the token is dead everywhere (None: never; issue 16)."""

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @staticmethod
    def hash_token(raw: str) -> str:
        """SHA-256 hex digest of a raw token (tokens are random, so no salt is needed)."""
        return hashlib.sha256(raw.encode()).hexdigest()


class UsageRecord(models.Model):
    """One provider call's tokens and cost (issue 17; seed 002's cost tracker).

    Written for every metered call (``providers.metering``): a turn's model requests, titles,
    compactions. It names its dialog and turn by id, not by foreign key, so ``purge`` and deleted
    dialogs keep the usage totals. Token counts are the provider's when it reported usage, else
    estimated from the request and answer (``estimated``). ``input_tokens`` includes the cached
    ones (as OpenAI reports them); ``cost`` follows the preset's prices at the time of the call.
    """

    class Kind(models.TextChoices):
        TURN = "turn"
        TITLE = "title"
        COMPACTION = "compaction"
        PROBE = "probe"
        TASK = "task"

    created_at = models.BigIntegerField(default=now_ms, db_index=True)
    day = models.DateField(db_index=True, help_text="the UTC day of the call")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="usage"
    )
    username = models.CharField(max_length=150, blank=True, default="")
    dialog_id = models.CharField(max_length=255, blank=True, default="", db_index=True)
    turn_id = models.CharField(max_length=64, blank=True, default="")
    channel = models.CharField(max_length=32, blank=True, default="")
    preset = models.CharField(max_length=64, blank=True, default="")
    provider = models.CharField(max_length=32, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TURN)
    outcome = models.CharField(max_length=16, blank=True, default="ok")
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    reasoning_tokens = models.PositiveBigIntegerField(default=0)
    estimated = models.BooleanField(default=False)
    latency_ms = models.PositiveIntegerField(default=0)
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    cost = models.DecimalField(max_digits=24, decimal_places=12, default=0)

    class Meta:
        indexes = [models.Index(fields=["user", "day"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.preset} {self.input_tokens}+{self.output_tokens}"


class MemoryItem(models.Model):
    """Long-term knowledge the agent saved for its owner (seed 000 §7.1; the tools: ``tools.memory``)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE)
    channel = models.CharField(max_length=32, blank=True, default="")
    chat_id = models.CharField(max_length=128, blank=True, default="")
    content = models.TextField()
    tags = models.JSONField(default=list, blank=True)
    created_at = models.BigIntegerField(default=now_ms)
    updated_at = models.BigIntegerField(default=now_ms)

    def __str__(self) -> str:
        return self.content[:60]


class Plan(models.Model):
    """The dialog's active plan (seed 000 §7.1), written by the plan tools."""

    dialog = models.OneToOneField(Dialog, on_delete=models.CASCADE, related_name="plan")
    content = models.JSONField(default=dict, blank=True)
    updated_at = models.BigIntegerField(default=now_ms)

    def __str__(self) -> str:
        return f"plan of {self.dialog_id}"


class FeishuMessage(models.Model):
    """One Feishu message the app received (FEISHU.md §3, §6), and how its answer went out.

    The row is the receive de-duplication: unique on ``(app_id, message_id)`` — a database
    constraint, so a redelivery, concurrent or hours later and in any process, finds it and starts
    nothing. ``status`` says what became of the message: ``received`` (recorded and acknowledged;
    its media or command still to handle), ``accepted`` (in its dialog's inbox as ``inbox``),
    ``answered`` (a command, answered), ``ignored`` (too old, not allowed, nothing to answer —
    ``note`` says why) or ``refused`` (the dialog's inbox was full; the user was told).

    ``card`` is the answer's delivery state as the turn's sink saved it
    (``delivery.platforms.feishu.sink.CardState``: card and message ids, the last CardKit
    ``sequence``, whether the final went out); ``final_delivered_at`` is set once the platform
    confirmed the final answer. Times are ms since the epoch; ``sent_at`` is the platform's.
    """

    class Status(models.TextChoices):
        RECEIVED = "received"
        ACCEPTED = "accepted"
        ANSWERED = "answered"
        IGNORED = "ignored"
        REFUSED = "refused"

    app_id = models.CharField(max_length=64)
    message_id = models.CharField(max_length=64)
    event_id = models.CharField(max_length=64, blank=True, default="")
    chat_id = models.CharField(max_length=128)
    chat_type = models.CharField(max_length=16, blank=True, default="")
    sender_open_id = models.CharField(max_length=64, blank=True, default="")
    # The parsed message (``conversations.feishu.events.FeishuMessageEvent``) while it waits.
    event = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RECEIVED)
    note = models.TextField(blank=True, default="")
    inbox = models.OneToOneField(
        InboxMessage, null=True, blank=True, on_delete=models.SET_NULL, related_name="feishu"
    )
    sent_at = models.BigIntegerField(default=0)
    received_at = models.BigIntegerField(default=now_ms)
    # A process handling a ``received`` row claims it until then (a crashed one's claim lapses).
    claimed_until = models.BigIntegerField(null=True, blank=True)
    card = models.JSONField(null=True, blank=True)
    final_delivered_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["app_id", "message_id"], name="feishu_message_once"),
        ]
        indexes = [models.Index(fields=["status", "received_at"])]

    def __str__(self) -> str:
        return f"feishu {self.message_id} ({self.status})"


# The interop and automation models (issue 18) live in their own modules; importing them here
# registers them with the app (and keeps ``from conversations.models import …`` working).
from conversations.automation_models import BackgroundTask, Schedule, ScheduleRun  # noqa: E402, F401
from conversations.mcp_models import McpServer, McpServerStatus  # noqa: E402, F401
