"""The export file format, version 1, as strict pydantic models; :func:`validate_document`.

The document (``README.md`` here has every rule and why)::

    {"format": "picobot-export", "version": 1, "exported_at": <ms>,
     "dialogs": [{<DIALOG_FIELDS>, "owner": <username or null>, "plan": {content, updated_at} | null,
                  "messages": [{<MESSAGE_FIELDS>}, ...]}, ...]}

The models are strict (no coercion: ``1.0`` and ``true`` are no integer, ``"1"`` no number), forbid
unknown fields at every level and take no ``NaN``/``Infinity``; integer ranges and string lengths
are the model columns'. Free-form values (``provider_state``, ``source``, a tool call's
``arguments``, a plan's ``content``) nest at most ``providers.json_depth.MAX_JSON_DEPTH`` deep.
Field descriptions follow "must be" (``errors.describe`` words a refusal with them). Reads no DB;
imports the Django models for their columns' limits.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from django.db.backends.base.operations import BaseDatabaseOperations
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WrapValidator,
    model_validator,
)

from conversations.agent.media import MediaError, validate_media
from conversations.models import Dialog, Message, Plan
from conversations.transfer.errors import TransferError, describe, refusal, shown, unknown_fields
from conversations.transfer.strict_json import check_storable_json
from providers.json_depth import MAX_JSON_DEPTH, value_too_deep

EXPORT_FORMAT = "picobot-export"
EXPORT_VERSION = 1
# Every durable Dialog column (not the lease, the inbox position or the compaction claim: runtime
# state of a live server) and every concrete Message column but the dialog key; tests check both.
DIALOG_FIELDS = (
    "id", "channel", "chat_id", "dialog_id", "title", "title_is_default", "created_at", "last_active_at",
    "message_count", "total_message_count", "state_version", "history_revision", "usage_input_tokens",
    "usage_output_tokens", "model", "summary", "summary_seq", "auto_compact_failures", "title_attempted_at",
    "deleted_at",
)  # fmt: skip
MESSAGE_FIELDS = (
    "id", "seq", "role", "content", "reasoning_content", "provider_state", "tool_calls", "tool_call_id",
    "tool_name", "is_error", "media_refs", "turn_id", "iteration", "completion_status", "truncated", "source",
    "created_at",
)  # fmt: skip

MAX_TOOL_ID_CHARS = 512
"""Bound of a message's ``tool_call_id``/``tool_name`` and of a tool call's ``id``/``name`` (model
generated, stored as text: an import must not bring in megabytes of them)."""
MAX_OWNER_CHARS = 150
MAX_TITLE_CHARS = Dialog._meta.get_field("title").max_length
MEDIA_KEYS = frozenset({"mime_type", "data"})
ROLES = tuple(sorted(c.value for c in Message.Role))
STATUSES = tuple(sorted(c.value for c in Message.CompletionStatus))
_UUID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"  # str(uuid.UUID(…))


# --- field types: each helper returns an ``Annotated`` type to annotate a field with ------------


def _column(model: type, name: str, *, nullable: bool = False) -> Any:
    """An integer the column holds: its range on every supported database, never negative."""
    kind = model._meta.get_field(name).get_internal_type()
    low, high = BaseDatabaseOperations.integer_field_ranges.get(kind, (0, 2**63 - 1))
    low = max(low, 0)
    number = Annotated[int, Field(ge=low, le=high)]
    what = f"an integer from {low} to {high}"
    if nullable:
        return Annotated[number | None, Field(description=f"{what} or null")]
    return Annotated[number, Field(description=what)]


def _text(max_chars: int | None = None, *, nullable: bool = False, non_empty: bool = False) -> Any:
    """A string, at most ``max_chars`` characters long when given."""
    text = Annotated[str, Field(min_length=1 if non_empty else None, max_length=max_chars)]
    what = "a non-empty string" if non_empty else "a string"
    if max_chars is not None:
        what += f" of at most {max_chars} characters"
    if nullable:
        return Annotated[text | None, Field(description=f"{what} or null")]
    return Annotated[text, Field(description=what)]


def _key_part(name: str) -> Any:
    """``channel``, ``chat_id`` or ``dialog_id``: required, printable, the column's length."""
    limit = Dialog._meta.get_field(name).max_length
    what = f"a non-empty printable string of at most {limit} characters"

    def check(value: Any, handler: Any) -> str:
        # One wording for "is required (…)" and "must be (…)"; null counts as missing.
        if value is None:
            raise refusal(f"is required ({what})")
        if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
            raise refusal(f"must be ({what})")
        return handler(value)

    return Annotated[str, Field(description=what), WrapValidator(check)]


def _bounded_depth(value: Any) -> Any:
    """A free-form value nested at most ``MAX_JSON_DEPTH`` deep, counted from the value itself."""
    if value_too_deep(value, MAX_JSON_DEPTH):
        raise refusal(f"nests deeper than {MAX_JSON_DEPTH} levels")
    return value


def _title(value: str) -> str:
    """A title as the app could have stored it (README.md): not today's rename rules, which
    refuse the control and private-use characters generated titles hold."""
    if not value or len(value) > MAX_TITLE_CHARS:
        raise refusal(f"must be a non-empty string of at most {MAX_TITLE_CHARS} characters")
    if " ".join(value.split()) != value:
        raise refusal("must be one line, without leading, trailing or repeated whitespace")
    return value


def _media(value: list) -> list:
    """``media_refs`` items exactly ``{mime_type, data}``, as ``conversations.agent.media``
    accepts a message's media (PNG, JPEG, GIF or WebP whose bytes match, base64, at most 8 items
    and 5 MiB in all)."""
    for k, item in enumerate(value):
        if isinstance(item, dict) and not item.keys() <= MEDIA_KEYS:
            raise refusal(
                unknown_fields([str(key) for key in item if key not in MEDIA_KEYS], EXPORT_VERSION), at=(k,)
            )
    try:
        validate_media(value)
    except MediaError as exc:
        text = str(exc)  # "media[0].mime_type must be …" or "media exceed 5 MiB in all"
        if text.startswith("media["):
            raise refusal(text[len("media") :], joiner="") from None
        raise refusal(text, joiner=": ") from None
    return value


def clean_plan_content(content: Any) -> dict:
    """A plan's ``content`` checked with the plan tool's own rules (``conversations.tools.plan``:
    its parameter schema, then ``clean_plan``); returns what the tool would store. ``{}`` (no
    plan) stays ``{}``. Raises ValueError saying what is wrong. Used by ``import`` and the admin:
    a plan the tool could not have written never reaches a turn."""
    from conversations.agent.tool_arguments import validate_arguments
    from conversations.agent.tool_registry import ToolError
    from conversations.tools.plan import clean_plan, plan_tools

    if content == {}:
        return {}
    if not isinstance(content, dict):
        raise ValueError('a plan is an object {"steps": [{"text", "status"}, …], "note": …}')
    schema = next(tool.parameters for tool in plan_tools() if tool.name == "plan_update")
    problem = validate_arguments(schema, content)
    if problem is not None:
        raise ValueError(f"not a plan the plan tool could write: {problem}")
    try:
        return clean_plan(content["steps"], content.get("note", ""))
    except ToolError as exc:
        raise ValueError(str(exc)) from None


def _plan_content(value: Any) -> Any:
    _bounded_depth(value)
    try:
        clean_plan_content(value)
    except ValueError as exc:
        raise refusal(str(exc), joiner=": ") from None
    return value


Title = Annotated[str, Field(description="a string"), AfterValidator(_title)]
Flag = Annotated[bool, Field(description="true or false")]
CanonicalUuid = Annotated[str, Field(pattern=_UUID_PATTERN)]
_UUID_WHAT = "a UUID string in canonical form (e.g. 3f2b…-…, lowercase)"
FreeObject = Annotated[dict[str, Any], Field(description="an object"), AfterValidator(_bounded_depth)]


# --- the document --------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class PlanIn(_Strict):
    """A dialog's plan: ``content`` by the plan tool's rules (:func:`clean_plan_content`)."""

    content: Annotated[Any, AfterValidator(_plan_content)] = Field(
        description='a plan {"steps": [{"text", "status"}, …], "note": …}'
    )
    updated_at: _column(Plan, "updated_at", nullable=True) = None


class ToolCallIn(_Strict):
    """One call of an assistant message; ``raw_arguments`` when the model's text was no object."""

    id: _text(MAX_TOOL_ID_CHARS, non_empty=True)
    name: _text(MAX_TOOL_ID_CHARS, non_empty=True)
    arguments: FreeObject
    raw_arguments: _text() = None


class MessageIn(_Strict):
    """One history row; every field but ``seq`` and ``role`` may be left out (the column default)."""

    id: CanonicalUuid = Field(None, description=_UUID_WHAT)
    seq: _column(Message, "seq")
    role: Literal[ROLES] = Field(description=f"one of {list(ROLES)}")
    content: _text() = None
    reasoning_content: _text(nullable=True) = None
    provider_state: Annotated[Any, AfterValidator(_bounded_depth)] = None
    tool_calls: list[ToolCallIn] = Field(None, description="a list")
    tool_call_id: _text(MAX_TOOL_ID_CHARS, nullable=True) = None
    tool_name: _text(MAX_TOOL_ID_CHARS, nullable=True) = None
    is_error: Flag = None
    media_refs: Annotated[list[Any], AfterValidator(_media)] = Field(None, description="a list")
    turn_id: CanonicalUuid | None = Field(None, description=_UUID_WHAT + ", or null")
    iteration: _column(Message, "iteration") = None
    completion_status: Literal[STATUSES] = Field(None, description=f"one of {list(STATUSES)}")
    truncated: Flag = None  # absent in exports made before the column: the default, False
    source: FreeObject = None
    created_at: _column(Message, "created_at") = None

    @model_validator(mode="after")
    def _media_on_user_messages_only(self) -> MessageIn:
        if self.media_refs and self.role != Message.Role.USER:
            raise refusal(
                f"only user messages carry media (this one is {self.role!r})", at=("media_refs",), joiner=": "
            )
        return self


class DialogIn(_Strict):
    """One dialog: its key parts are required, every other field may be left out."""

    id: str = Field(None, description="the dialog's unified id channel:chat_id:dialog_id")
    channel: _key_part("channel")
    chat_id: _key_part("chat_id")
    dialog_id: _key_part("dialog_id")
    owner: _text(MAX_OWNER_CHARS, nullable=True) = None
    title: Title = None
    title_is_default: Flag = None
    created_at: _column(Dialog, "created_at") = None
    last_active_at: _column(Dialog, "last_active_at") = None
    message_count: _column(Dialog, "message_count") = None
    total_message_count: _column(Dialog, "total_message_count") = None
    state_version: _column(Dialog, "state_version") = None
    history_revision: _column(Dialog, "history_revision") = None
    usage_input_tokens: _column(Dialog, "usage_input_tokens") = None
    usage_output_tokens: _column(Dialog, "usage_output_tokens") = None
    model: _text(Dialog._meta.get_field("model").max_length) = None
    summary: _text() = None
    summary_seq: _column(Dialog, "summary_seq") = None
    auto_compact_failures: _column(Dialog, "auto_compact_failures") = None
    title_attempted_at: _column(Dialog, "title_attempted_at") = None
    deleted_at: _column(Dialog, "deleted_at", nullable=True) = None
    plan: PlanIn | None = Field(None, description="null or {content, updated_at}")
    messages: list[MessageIn] = Field(description="a list")

    @property
    def unified_id(self) -> str:
        return Dialog.unified_id(self.channel, self.chat_id, self.dialog_id)

    @model_validator(mode="after")
    def _consistent(self) -> DialogIn:
        if ":" in self.channel or ":" in self.dialog_id:
            raise refusal("channel and dialog_id cannot contain ':'", joiner=": ")
        if self.id is not None and self.id != self.unified_id:
            raise refusal(
                f"{shown(self.id)} is not channel:chat_id:dialog_id ({self.unified_id!r})", at=("id",)
            )
        for j, m in enumerate(self.messages):
            if m.seq != j + 1:
                raise refusal(
                    f"must be {j + 1} (seq is contiguous from 1), got {m.seq}", at=("messages", j, "seq")
                )
        last = len(self.messages)
        if self.history_revision is not None and self.history_revision != last:
            raise refusal(f"is {self.history_revision} but the last seq is {last}", at=("history_revision",))
        if (self.summary_seq or 0) > last:
            raise refusal(f"is above the last seq {last}", at=("summary_seq",))
        return self


class ExportDocument(_Strict):
    """The whole file: dialog ids and message ids are unique in it."""

    format: Literal[EXPORT_FORMAT]
    version: Literal[EXPORT_VERSION]
    exported_at: _column(Dialog, "created_at") = None
    dialogs: list[DialogIn] = Field(description="a list")

    @model_validator(mode="after")
    def _unique_ids(self) -> ExportDocument:
        dialogs: set[str] = set()
        messages: set[str] = set()
        for i, d in enumerate(self.dialogs):
            if d.unified_id in dialogs:
                raise refusal(f"dialog {d.unified_id!r} appears twice", at=("dialogs", i), joiner=": ")
            dialogs.add(d.unified_id)
            for j, m in enumerate(d.messages):
                if m.id is not None and m.id in messages:
                    raise refusal(f"{m.id!r} appears twice", at=("dialogs", i, "messages", j, "id"))
                if m.id is not None:
                    messages.add(m.id)
        return self


def validate_document(doc: Any) -> list[dict[str, Any]]:
    """Check an export document; return its dialogs (the document's own dicts).

    First the format and the version (a newer file says so), then every value storable as it is
    (``strict_json.check_storable_json``: no NUL, no lone surrogate, no non-finite number), then
    :class:`ExportDocument`. Raises TransferError naming the place
    (``dialogs[0].messages[3].seq must be 4 …``). Pure (no DB).
    """
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise TransferError(f'not a PicoBot export (expected "format": "{EXPORT_FORMAT}")')
    version = doc.get("version")
    if version != EXPORT_VERSION or isinstance(version, bool):
        hint = (
            " (written by a newer PicoBot: upgrade this one)"
            if isinstance(version, int) and version > 1
            else ""
        )
        raise TransferError(
            f"unsupported export version {shown(version)}; this PicoBot reads version {EXPORT_VERSION}{hint}"
        )
    check_storable_json(doc, max_depth=None)
    try:
        ExportDocument.model_validate(doc)
    except ValidationError as exc:
        raise TransferError(describe(exc, ExportDocument, EXPORT_VERSION)) from None
    return doc["dialogs"]
