"""Scheduled prompts in the admin (issue 18): list and filter them, pause, resume or change
cron/zone/prompt with the rules of ``/schedule`` and REST, and browse what each slot did.

Schedules are added by their users (``/schedule add``, REST), so the admin adds none; a change
of ``cron``, ``tz`` or ``enabled`` counts the next due time from now (no missed runs). Run rows
are the record of exactly-once and are read-only.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from conversations.admin.common import ReadOnlyMixin, cut, link_to_dialog, ms_column
from conversations.agent.schedule_timing import ScheduleSpecError
from conversations.models import Schedule, ScheduleRun, now_ms
from conversations.storage.schedules import checked_fields, first_slot
from picobot_site.admin_safety import SafeLookupsMixin


class ScheduleForm(forms.ModelForm):
    """``cron``, ``tz`` and ``prompt`` are checked as ``/schedule add`` checks them."""

    class Meta:
        model = Schedule
        fields = ["enabled", "cron", "tz", "prompt"]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("enabled") and self.instance.pk and self.instance.dialog.deleted_at is not None:
            self.add_error("enabled", "its dialog was deleted: it cannot run again")
        try:
            data["cron"], data["tz"], data["prompt"] = checked_fields(
                data.get("cron", ""), data.get("tz", ""), data.get("prompt", "")
            )
        except ScheduleSpecError as exc:
            self.add_error(exc.field, exc.reason)
        return data


@admin.register(Schedule)
class ScheduleAdmin(SafeLookupsMixin, admin.ModelAdmin):
    form = ScheduleForm
    list_display = ["id", "dialog_link", "owner", "cron", "tz", "enabled", "next_run", "last", "excerpt"]
    list_select_related = ["dialog", "owner"]
    list_filter = ["enabled", "last_status", "tz"]
    search_fields = ["=id", "=dialog__id", "owner__username", "prompt"]
    ordering = ["id"]
    fields = ["dialog_link", "owner", "enabled", "cron", "tz", "prompt", "next_run", "last", "runs"]
    readonly_fields = ["dialog_link", "owner", "next_run", "last", "runs"]
    actions = ["pause", "resume"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).defer("dialog__summary")

    def save_model(self, request: HttpRequest, obj: Schedule, form: forms.ModelForm, change: bool) -> None:
        if {"cron", "tz", "enabled"} & set(form.changed_data):
            _restart(obj, obj.enabled)
        obj.updated_at = now_ms()
        super().save_model(request, obj, form, change)

    @admin.action(description="Pause the selected schedules")
    def pause(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set(request, queryset, False)

    @admin.action(description="Resume the selected schedules (counting from now)")
    def resume(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set(request, queryset, True)

    def _set(self, request: HttpRequest, queryset: QuerySet, enabled: bool) -> None:
        changed, rows = 0, queryset.filter(enabled=not enabled)
        orphaned = rows.filter(dialog__deleted_at__isnull=False).count() if enabled else 0
        if enabled:
            rows = rows.filter(dialog__deleted_at__isnull=True)
        for row in rows:
            _restart(row, enabled)
            row.updated_at = now_ms()
            row.save(update_fields=["enabled", "anchor_at", "next_run_at", "updated_at"])
            changed += 1
        done = f"{changed} schedule(s) {'resumed' if enabled else 'paused'}."
        self.message_user(request, done + (f" {orphaned} not: their dialog was deleted." if orphaned else ""))

    @admin.display(description="dialog", ordering="dialog")
    def dialog_link(self, row: Schedule) -> str:
        return link_to_dialog(row)

    @admin.display(description="prompt")
    def excerpt(self, row: Schedule) -> str:
        return cut(row.prompt, 80)

    @admin.display(description="last slot")
    def last(self, row: Schedule) -> str:
        if row.last_run_at is None:
            return "—"
        detail = f": {cut(row.last_detail, 60)}" if row.last_detail else ""
        return f"{row.last_status} ({ms_column('last_run_at', '')(self, row)}){detail}"

    @admin.display(description="runs")
    def runs(self, row: Schedule) -> str:
        url = reverse("admin:conversations_schedulerun_changelist") + f"?schedule__id__exact={row.pk}"
        return format_html('<a href="{}">{} run records</a>', url, row.runs.count())

    next_run = ms_column("next_run_at", "next run")


def _restart(row: Schedule, enabled: bool) -> None:
    """Enable (next due time counted from now) or disable ``row``, unsaved."""
    now = now_ms()
    row.enabled, row.anchor_at = enabled, now
    row.next_run_at = first_slot(row.cron, row.tz, now) if enabled else None


@admin.register(ScheduleRun)
class ScheduleRunAdmin(ReadOnlyMixin, SafeLookupsMixin, admin.ModelAdmin):
    list_display = ["schedule", "slot", "status", "missed", "detail", "inbox", "worker", "created"]
    list_filter = ["status", "missed"]
    search_fields = ["=schedule__id"]
    ordering = ["-slot_at"]
    raw_id_fields = ["schedule", "inbox"]

    slot = ms_column("slot_at", "slot")
    created = ms_column("created_at", "recorded")
