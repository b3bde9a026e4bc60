"""Request and response shapes of the REST control API (PROTOCOL §2; rows as in PROTOCOL §1).

Requests refuse unknown members (422), so a misspelt or unsupported field (``media``…) is never
silently ignored. Responses may gain members later; clients ignore members they do not know.
"""

from __future__ import annotations

from typing import Any, Literal

from ninja import Field, Schema
from pydantic import ConfigDict, model_validator

MAX_CONTENT_CHARS = 32_000  # = conversations.chat.frames.MAX_CONTENT_CHARS (PROTOCOL §1 ``message``)
MAX_CLIENT_MSG_ID = 64
MAX_HISTORY_LIMIT = 200
MAX_DIALOG_PAGE = 200
MAX_SEQ = 2**53  # JavaScript's safe integers, as on the WebSocket


class _Input(Schema):
    model_config = ConfigDict(extra="forbid")


# --- errors --------------------------------------------------------------------------------------


class ValidationIssue(Schema):
    loc: list[str | int] = Field(
        ..., description='where: e.g. `["body", "payload", "content"]`, `["query", "limit"]`'
    )
    msg: str
    type: str


class ErrorOut(Schema):
    """Every error answer (PROTOCOL §2). ``ref`` names the server log entry."""

    code: str = Field(..., description="machine-readable: not_found, unauthorized, validation_error, …")
    message: str
    ref: str = Field(..., description="reference of the server log entry of this error")
    errors: list[ValidationIssue] | None = Field(
        None, description="422 `validation_error` only: each problem"
    )
    checks: dict[str, str] | None = Field(None, description="503 `not_ready` only: each dependency's state")


# --- service -------------------------------------------------------------------------------------


class HealthOut(Schema):
    status: Literal["ok"] = "ok"


class ReadyOut(Schema):
    status: Literal["ready"] = "ready"
    checks: dict[str, str] = Field(..., description='`{"database": "ok", "channel_layer": "ok"}`')


# --- dialogs -------------------------------------------------------------------------------------


class UsageOut(Schema):
    """Sums of usage rows (issue 17): provider calls, tokens (input includes cached), cost."""

    calls: int = Field(0, description="provider calls (turns, titles, compactions)")
    input_tokens: int = Field(..., description="input tokens, cached ones included")
    output_tokens: int = Field(..., description="output tokens, reasoning included")
    cached_tokens: int = Field(0, description="input tokens the provider served from its cache")
    cost: float = Field(0.0, description="in the currency the presets' prices are written in")


class DialogOut(Schema):
    """One dialog: the fields of ``storage.dialog_info`` (and of ``/info``'s ``info`` object)."""

    session_id: str = Field(..., description="the unified id `{channel}:{chat_id}:{dialog_id}`")
    dialog_id: str
    channel: str
    chat_id: str
    title: str
    title_is_default: bool
    message_count: int = Field(..., description="user messages")
    total_message_count: int = Field(..., description="history rows (user, assistant, tool)")
    history_revision: int = Field(..., description="the highest committed `seq`")
    created_at: int = Field(..., description="ms since the Unix epoch")
    last_active_at: int = Field(..., description="ms since the Unix epoch")
    model: str = Field(
        ..., description="the dialog's model preset (the default preset's name when it chose none)"
    )
    model_label: str = Field("", description="the preset as `/info` names it: `NAME (provider model)`")
    usage: UsageOut
    compacted_through_seq: int = Field(..., description="rows up to this `seq` are summarised (0: none)")
    queued: int = Field(..., description="accepted messages waiting for their turn")
    running: bool = Field(..., description="a turn of this dialog runs now")
    active: bool = Field(..., description="the dialog is its chat's active dialog")


class UsageItemOut(UsageOut):
    key: str = Field(..., description="the dialog id, the username or the UTC day (YYYY-MM-DD)")


class UsagePage(Schema):
    """``GET /api/usage`` (issue 17): usage sums per group."""

    group_by: str = Field(..., description="`dialog`, `user` or `day`")
    items: list[UsageItemOut] = Field(..., description="ordered by key")


class DialogPage(Schema):
    items: list[DialogOut] = Field(..., description="most recently active first")
    total: int = Field(..., description="dialogs matching the filters")
    limit: int
    offset: int


class DialogCreate(_Input):
    title: str | None = Field(
        None,
        description="non-blank, ≤ 200 characters after whitespace is collapsed, no control "
        "characters (else 422 `invalid_title`); default: `New chat`",
    )


class DialogUpdate(_Input):
    """``PATCH /api/dialogs/{id}``: a new title, a model preset, or both (at least one)."""

    title: str | None = Field(
        None, description="the new title: a user rename (never replaced by a generated title)"
    )
    model: str | None = Field(
        None,
        max_length=200,
        description="the dialog's model preset (`GET /api/models`), as `/model NAME`: its next turn "
        'uses it; `""` or `null`: the default preset',
    )

    @model_validator(mode="after")
    def _something_to_change(self) -> DialogUpdate:
        given = self.model_fields_set
        if not given:
            raise ValueError("give a `title`, a `model`, or both")
        if "title" in given and self.title is None:
            raise ValueError("`title` cannot be null; leave it out to keep the title")
        return self


class ModelsOut(Schema):
    """``GET /api/models``: the deployment's model presets, without keys."""

    default: str = Field(..., description="the preset a dialog uses until it chooses one")
    items: list[dict[str, Any]] = Field(
        ...,
        description="`{name, provider, base_url, model, context_window, max_tokens, price_input, "
        "price_output, price_cached (per million tokens), fallbacks, vision, reasoning, description, "
        "available (false: its key variable is not set)}`",
    )


# --- messages ------------------------------------------------------------------------------------


class ToolCallOut(Schema):
    id: str
    name: str
    arguments: dict[str, Any]


class TurnOutcomeOut(Schema):
    """How a user message's turn ended when it did not complete (PROTOCOL §1 "History message")."""

    status: Literal["failed", "interrupted", "cancelled"] = Field(
        ...,
        description="failed: the turn failed (e.g. the model provider could not be reached); "
        "interrupted: it died with its server process (a restart or crash); cancelled: it was "
        "stopped (`/stop`, or the server shutting down)",
    )
    error: str = Field(
        ..., description="what the turn's terminal snapshot showed (user-facing, may be empty)"
    )


class MediaOut(Schema):
    """An image of a user message: fetch ``url`` (same authentication) for its bytes."""

    mime_type: str = Field(..., description="image/png, image/jpeg, image/gif or image/webp")
    url: str = Field(
        ..., description="`/api/dialogs/{session_id}/messages/{message_id}/media/{index}` (id URL-encoded)"
    )


class MessageOrigin(Schema):
    """Where an automated user message came from (``conversations.agent.automated_input``)."""

    kind: str = Field(..., description="schedule or task_notification")
    ref: str = Field(..., description="the schedule's or the background task's id")
    label: str = Field(..., description="a short text clients show with the message")


class HistoryMessage(Schema):
    """PROTOCOL §1 "History message"."""

    id: str
    seq: int
    role: str = Field(..., description="user, assistant or tool")
    content: str
    reasoning: str | None
    tool_calls: list[ToolCallOut]
    tool_call_id: str | None
    tool_name: str | None
    is_error: bool
    turn_id: str | None
    iteration: int
    completion_status: str = Field(..., description="completed, cancelled or interrupted")
    truncated: bool = Field(
        False,
        description="assistant messages only: the model's response stopped at the provider's output "
        "limit, so its answer (or its reasoning, when it has no content) is cut off",
    )
    created_at: int
    outcome: TurnOutcomeOut | None = Field(
        None,
        description="user messages only: how their turn ended when it did not complete; null "
        "when it completed, is queued or running, and on assistant and tool messages",
    )
    media: list[MediaOut] = Field(
        default_factory=list,
        description="user messages only: the images sent with it, in order (empty on other messages)",
    )
    origin: MessageOrigin | None = Field(
        None,
        description="user messages only: set when no person typed it — a scheduled prompt's due "
        "run or a background task's completion; null otherwise",
    )


class HistoryPage(Schema):
    session_id: str
    history_revision: int
    messages: list[HistoryMessage] = Field(..., description="oldest first")
    has_more: bool = Field(..., description="older messages exist below the first one")


class MessageIn(_Input):
    content: str = Field(
        ...,
        min_length=1,
        max_length=MAX_CONTENT_CHARS,
        description="the user message; not blank, and not a slash command",
    )
    client_msg_id: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_CLIENT_MSG_ID,
        description="idempotency key, unique per user (shared with the WebSocket): the same id again "
        "answers the same `message_id` and never creates a second message",
    )


class MessageAccepted(Schema):
    message_id: str = Field(..., description="the inbox id (the WebSocket `ack`'s `message_id`)")
    session_id: str
    queued: int = Field(..., description="messages ahead of it in the dialog")
    duplicate: bool = Field(
        ..., description="the `client_msg_id` was accepted before: nothing new was queued"
    )


# --- turns ---------------------------------------------------------------------------------------


class TurnOut(Schema):
    """A turn snapshot, as the WebSocket's ``turn_updated.turn`` (PROTOCOL §1)."""

    model_config = ConfigDict(extra="allow")

    id: str
    session_id: str
    message_id: str = Field(..., description="id pre-allocated for the turn's final assistant message")
    revision: int = Field(..., description="0: a placeholder (the worker running the turn did not answer)")
    status: str = Field(..., description="running, completed, cancelled, failed")
    phase: str = Field(..., description="queued, compacting, reasoning, responding, acting, finalizing")
    blocks: list[dict[str, Any]]
    usage: dict[str, Any] | None
    error: str | None


class StopOut(Schema):
    session_id: str
    turn_id: str = Field(..., description="the turn that was running when asked (the only one stopped)")
    status: Literal["stopping"] = "stopping"
    acknowledged: bool = Field(..., description="the worker running the turn confirmed the cancel")
    message: str


class CompactOut(Schema):
    session_id: str
    status: Literal["started"] = "started"
    message: str


class ScheduleOut(Schema):
    """A scheduled prompt (issue 18; ``storage.schedules``)."""

    id: int
    session_id: str = Field(..., description="the dialog whose inbox its prompt enters")
    cron: str = Field(
        ..., description="a 5-field cron expression, an alias such as `@daily`, or `@every 30m`"
    )
    tz: str = Field(..., description="the IANA time zone the cron expression is read in")
    prompt: str
    enabled: bool
    next_run_at: int | None = Field(..., description="the next due time (ms); null while paused")
    created_at: int
    last_run_at: int | None = Field(..., description="the latest slot handled (ms), null before the first")
    last_status: str = Field(
        ..., description='`queued`, `skipped` (missed), `refused` or "" before the first'
    )
    last_detail: str = Field(..., description="why the latest slot was skipped or refused")
    dialog_title: str = Field(..., description="the title of the dialog `session_id`")


class SchedulePage(Schema):
    items: list[ScheduleOut] = Field(..., description="oldest first")


class ScheduleCreate(_Input):
    """``cron`` and ``prompt`` are required; a missing, null, empty or too long one is a 422
    ``invalid_schedule`` naming it, like a bad value (the same checks as ``/schedule add``)."""

    cron: str | None = Field(
        None,
        description='minute hour day-of-month month day-of-week (`"0 9 * * MON-FRI"`), `@hourly`, '
        "`@daily`, `@weekly`, `@monthly`, `@yearly`, or an interval `@every N` + m|h|d (≥ 1 minute); "
        "at most 100 characters",
    )
    prompt: str | None = Field(
        None, description="what enters the inbox at each due time; at most 4000 characters"
    )
    tz: str | None = Field(None, description="an IANA zone; default `PICOBOT_TIME_ZONE`")
    enabled: bool = True


class ScheduleUpdate(_Input):
    """Only the fields given change. A new ``cron`` or ``tz`` counts from now, as a resume does."""

    enabled: bool | None = Field(
        None, description="false pauses it; true resumes it from now (no missed runs)"
    )
    cron: str | None = Field(None, description="as when creating it")
    tz: str | None = Field(None, description='an IANA zone; `""`: `PICOBOT_TIME_ZONE`')
    prompt: str | None = Field(None, description="what enters the inbox at each due time")


class TaskOut(Schema):
    """A background task (issue 18, seed 000 §9; ``storage.tasks``): what ``/tasks`` lists."""

    id: str
    status: str = Field(..., description="`running`, `completed`, `failed`, `cancelled` or `interrupted`")
    session_id: str = Field(..., description="the dialog that started it (its result is answered there)")
    dialog_title: str
    dialog_deleted: bool = Field(..., description="its dialog was deleted (which stops a running task)")
    prompt: str
    started_at: int
    finished_at: int | None = Field(..., description="null while it runs")
    result: str = Field(..., description="a completed task's answer")
    error: str = Field(..., description="why it failed, was cancelled or interrupted")
    iterations: int = Field(..., description="model requests it made")
    input_tokens: int
    output_tokens: int


class TaskPage(Schema):
    items: list[TaskOut] = Field(..., description="newest first")


class TaskStopOut(Schema):
    id: str
    status: str = Field(..., description="the task's status when the stop was asked")
    stopping: bool = Field(..., description="it was running: it ends `cancelled` within moments")
