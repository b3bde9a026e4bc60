"""The history rows and the inbox, read-only (rows written by the agent only; DESIGN §3).

The message list is the way through a dialog's whole history (filter by dialog): it lists
excerpts cut by the database and never loads the big columns (content, reasoning, provider
state, base64 media). A row's page shows it all; the provider state is server-only data.
"""

from __future__ import annotations

from django.contrib import admin

from conversations.admin.common import (
    EXCERPT,
    LeanListMixin,
    ReadOnlyMixin,
    cut,
    link_to_dialog,
    media_summary,
    message_role,
    ms_column,
    pretty_json,
)
from conversations.models import InboxMessage, Message
from picobot_site.admin_safety import SafeLookupsMixin


@admin.register(Message)
class MessageAdmin(SafeLookupsMixin, ReadOnlyMixin, LeanListMixin, admin.ModelAdmin):
    list_display = ["dialog_link", "seq", "who", "excerpt", "completion_status", "created"]
    list_select_related = ["dialog"]
    list_filter = ["role", "completion_status", "is_error"]
    search_fields = ["content", "=dialog__id", "=tool_call_id"]
    search_help_text = "Words of the content, an exact dialog id, or an exact tool call id."
    raw_id_fields = ["dialog"]
    show_full_result_count = False
    list_per_page = 100
    changelist_defer = (
        "content",
        "reasoning_content",
        "provider_state",
        "media_refs",
        "tool_calls",
        "source",
        "dialog__summary",
    )
    changelist_excerpts = {"content_head": ("content", EXCERPT)}
    fields = [
        "dialog",
        "seq",
        "role",
        "tool_name",
        "tool_call_id",
        "is_error",
        "completion_status",
        "turn_id",
        "iteration",
        "created",
        "content",
        "reasoning_content",
        "tool_calls_shown",
        "media_shown",
        "source_shown",
        "provider_state_shown",
    ]
    readonly_fields = fields

    @admin.display(description="dialog", ordering="dialog")
    def dialog_link(self, row: Message) -> str:
        return link_to_dialog(row)

    @admin.display(description="role", ordering="role")
    def who(self, row: Message) -> str:
        return message_role(row)

    @admin.display(description="content")
    def excerpt(self, row: Message) -> str:
        head = getattr(row, "content_head", None)
        return cut(head if head is not None else row.content)

    created = ms_column("created_at", "created")

    @admin.display(description="tool calls")
    def tool_calls_shown(self, row: Message) -> str:
        return pretty_json(row.tool_calls) if row.tool_calls else "—"

    @admin.display(description="media")
    def media_shown(self, row: Message) -> str:
        return media_summary(row.media_refs)

    @admin.display(description="source")
    def source_shown(self, row: Message) -> str:
        return pretty_json(row.source) if row.source else "—"

    @admin.display(description="provider state (server only)")
    def provider_state_shown(self, row: Message) -> str:
        return pretty_json(row.provider_state) if row.provider_state is not None else "—"


@admin.register(InboxMessage)
class InboxMessageAdmin(SafeLookupsMixin, ReadOnlyMixin, LeanListMixin, admin.ModelAdmin):
    list_display = ["received", "dialog_id", "position", "status", "excerpt", "user"]
    list_select_related = ["user"]
    list_filter = ["status"]
    search_fields = ["content", "=dialog__id", "=client_msg_id"]
    ordering = ["-received_at"]
    show_full_result_count = False
    changelist_defer = ("content", "media", "channel_context", "source", "error")
    changelist_excerpts = {"content_head": ("content", EXCERPT)}
    fields = [
        "dialog_id",
        "position",
        "status",
        "user",
        "client_msg_id",
        "received",
        "started",
        "finished",
        "turn_id",
        "reply_message_id",
        "error",
        "content",
        "media_shown",
        "source",
        "notice_sent_at",
    ]
    readonly_fields = fields

    received = ms_column("received_at", "received")

    started = ms_column("started_at", "started", sortable=False)

    finished = ms_column("finished_at", "finished", sortable=False)

    @admin.display(description="content")
    def excerpt(self, row: InboxMessage) -> str:
        head = getattr(row, "content_head", None)
        return cut(head if head is not None else row.content)

    @admin.display(description="media")
    def media_shown(self, row: InboxMessage) -> str:
        return media_summary(row.media)
