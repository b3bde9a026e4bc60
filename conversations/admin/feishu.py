"""The Feishu messages PicoBot received, read-only: what became of each and of its answer (FEISHU.md §3).

One row per received message (unique on app + message id: the receive de-duplication). The list
shows the status, the chat, and whether the platform confirmed the answer's final; a row's page
shows the parsed event and the answer's card state. Nothing here is editable: the rows are the
channel's exactly-once record.
"""

from __future__ import annotations

from django.contrib import admin

from conversations.admin.common import LeanListMixin, ReadOnlyMixin, ms_column, pretty_json
from conversations.models import FeishuMessage
from picobot_site.admin_safety import SafeLookupsMixin


@admin.register(FeishuMessage)
class FeishuMessageAdmin(SafeLookupsMixin, ReadOnlyMixin, LeanListMixin, admin.ModelAdmin):
    list_display = ["received", "message_id", "chat_id", "chat_type", "status", "final_delivered", "note"]
    list_filter = ["status", "chat_type"]
    search_fields = ["=message_id", "=chat_id", "=event_id", "=sender_open_id"]
    search_help_text = "An exact message id (om_…), chat id (oc_…), event id or sender open_id (ou_…)."
    ordering = ["-received_at"]
    show_full_result_count = False
    changelist_defer = ("event", "card")
    fields = [
        "app_id",
        "message_id",
        "event_id",
        "chat_id",
        "chat_type",
        "sender_open_id",
        "status",
        "note",
        "inbox",
        "sent",
        "received",
        "final_delivered",
        "event_shown",
        "card_shown",
    ]
    readonly_fields = fields

    received = ms_column("received_at", "received")
    sent = ms_column("sent_at", "sent (platform)", sortable=False)
    final_delivered = ms_column("final_delivered_at", "final confirmed", sortable=False)

    @admin.display(description="event")
    def event_shown(self, row: FeishuMessage) -> str:
        return pretty_json(row.event)

    @admin.display(description="answer card")
    def card_shown(self, row: FeishuMessage) -> str:
        return pretty_json(row.card) if row.card else "—"
