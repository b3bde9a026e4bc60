"""``DeliveryFailure`` in the Django admin: find undelivered turns, mark them resolved (DESIGN §3)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from delivery.failures import resolve_delivery_failures
from delivery.models import DeliveryFailure
from picobot_site.admin_safety import SafeLookupsMixin


class ResolvedFilter(admin.SimpleListFilter):
    """Resolved = ``resolved_at`` is set."""

    title = "resolved"
    parameter_name = "resolved"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("yes", "Resolved"), ("no", "Unresolved")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.filter(resolved_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(resolved_at__isnull=True)
        return queryset


def _ms_to_text(ms: int | None) -> str:
    if ms is None:
        return "—"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@admin.register(DeliveryFailure)
class DeliveryFailureAdmin(SafeLookupsMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "created",
        "channel",
        "chat_id",
        "dialog_id",
        "stage",
        "attempts",
        "short_error",
        "resolved",
    ]
    list_filter = ["channel", "stage", ResolvedFilter]
    search_fields = ["chat_id", "dialog_id", "error"]
    ordering = ["-created_at"]
    actions = ["mark_resolved"]
    readonly_fields = [
        "channel",
        "chat_id",
        "dialog_id",
        "turn_id",
        "stage",
        "error",
        "attempts",
        "created_at",
        "resolved_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # rows are written by the agent only

    @admin.display(description="created", ordering="created_at")
    def created(self, row: DeliveryFailure) -> str:
        return _ms_to_text(row.created_at)

    @admin.display(description="error")
    def short_error(self, row: DeliveryFailure) -> str:
        return row.error if len(row.error) <= 80 else row.error[:79] + "…"

    @admin.display(description="resolved", boolean=True, ordering="resolved_at")
    def resolved(self, row: DeliveryFailure) -> bool:
        return row.resolved_at is not None

    @admin.action(description="Mark selected failures resolved", permissions=["change"])
    def mark_resolved(self, request: HttpRequest, queryset: QuerySet) -> None:
        count = resolve_delivery_failures(queryset)
        self.message_user(request, f"{count} delivery failure(s) marked resolved.", messages.SUCCESS)
