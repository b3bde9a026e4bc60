"""The background task admin: read-only rows (issue 18 "Background tasks").

Status, dialog, owner, times, limits and an excerpt of the result or error. Tasks are started by
the agent's ``spawn_task`` tool and end through their runner only (``runtime.background_tasks``):
the admin never changes them.
"""

from __future__ import annotations

from django.contrib import admin

from conversations.admin.common import ReadOnlyMixin, cut, link_to_dialog, ms_column
from conversations.models import BackgroundTask
from picobot_site.admin_safety import SafeLookupsMixin


@admin.register(BackgroundTask)
class BackgroundTaskAdmin(SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "status",
        "dialog_link",
        "owner",
        "started",
        "finished",
        "prompt_excerpt",
        "outcome",
    )
    list_filter = ("status", ("owner", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("dialog", "owner")
    search_fields = ("=id", "=dialog__id", "prompt")
    ordering = ("-started_at",)
    show_full_result_count = False
    started = ms_column("started_at", "started (UTC)")
    finished = ms_column("finished_at", "finished (UTC)")
    heartbeat = ms_column("heartbeat_at", "last heartbeat (UTC)")

    @admin.display(description="dialog")
    def dialog_link(self, row: BackgroundTask) -> str:
        return link_to_dialog(row)

    @admin.display(description="prompt")
    def prompt_excerpt(self, row: BackgroundTask) -> str:
        return cut(row.prompt)

    @admin.display(description="result or error")
    def outcome(self, row: BackgroundTask) -> str:
        return cut(row.error or row.result)
