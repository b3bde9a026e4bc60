"""The plan admin: a dialog's plan, checked with the plan tool's own rules.

A malformed plan would break every turn of its dialog, so the content goes through
``transfer.schema.clean_plan_content`` and is stored as the tool would store it; the JSON column takes
only what the database can store (:data:`~conversations.admin.fields.STORABLE_JSON`).
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from conversations.admin.common import cut, link_to_dialog, ms_column
from conversations.admin.fields import STORABLE_JSON
from conversations.models import Plan, now_ms
from conversations.transfer.schema import clean_plan_content
from picobot_site.admin_safety import SafeLookupsMixin


class PlanForm(forms.ModelForm):
    """The plan's content is checked with the plan tool's own rules (``transfer.schema.clean_plan_content``)
    and stored as the tool would store it: a malformed plan would break every turn of its dialog."""

    class Meta:
        model = Plan
        fields = ["dialog", "content"]

    def clean_content(self) -> Any:
        content = self.cleaned_data.get("content")
        try:
            return clean_plan_content({} if content is None else content)  # blank is no plan, as {}
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc


@admin.register(Plan)
class PlanAdmin(SafeLookupsMixin, admin.ModelAdmin):
    form = PlanForm
    formfield_overrides = STORABLE_JSON
    list_display = ["dialog_link", "excerpt", "updated"]
    list_select_related = ["dialog"]
    search_fields = ["=dialog__id", "dialog__title"]
    ordering = ["-updated_at"]
    raw_id_fields = ["dialog"]
    fields = ["dialog", "content", "updated"]
    readonly_fields = ["updated"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("dialog").defer("dialog__summary")

    def save_model(self, request: HttpRequest, obj: Plan, form: forms.ModelForm, change: bool) -> None:
        obj.updated_at = now_ms()
        super().save_model(request, obj, form, change)

    @admin.display(description="dialog", ordering="dialog")
    def dialog_link(self, row: Plan) -> str:
        return link_to_dialog(row)

    @admin.display(description="plan")
    def excerpt(self, row: Plan) -> str:
        return cut(json.dumps(row.content, ensure_ascii=False), 160)

    updated = ms_column("updated_at", "updated")
