"""The usage admin: one row per provider call, read-only, with the filtered rows' totals (issue 17).

Filters: day (date hierarchy), kind, preset, channel, estimated, outcome, user. Above the list,
the totals of every row the filters select (calls, input / output / cached tokens, cost), from the
same sums as ``GET /api/usage`` (``usage.sums``), so the two always agree.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from conversations.admin.common import ReadOnlyMixin, ms_column
from conversations.models import UsageRecord
from conversations.usage.sums import total_usage
from picobot_site.admin_safety import SafeLookupsMixin


@admin.register(UsageRecord)
class UsageRecordAdmin(SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
    change_list_template = "admin/conversations/usagerecord/change_list.html"
    date_hierarchy = "day"
    list_display = (
        "day",
        "kind",
        "preset",
        "username",
        "channel",
        "dialog_id",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "reasoning_tokens",
        "estimated",
        "cost",
        "outcome",
        "latency_ms",
        "ttft_ms",
    )
    list_filter = (
        "kind",
        "preset",
        "channel",
        "estimated",
        "outcome",
        ("user", admin.RelatedOnlyFieldListFilter),
    )
    search_fields = ("dialog_id", "turn_id", "username", "model")
    ordering = ("-created_at",)
    show_full_result_count = False
    readonly_fields = ("when",)
    when = ms_column("created_at", "started (UTC)")

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        context: Any = getattr(response, "context_data", None)
        if context is not None and "cl" in context:  # not a redirect (bad filter parameters)
            totals = total_usage(context["cl"].queryset)
            context["usage_totals"] = {**totals, "cost_text": f"{totals['cost']:.6f}"}
        return response
