"""The memory item admin: what the memory tools remember, editable by staff.

Tags are kept as the memory tools keep them (``memory.normalize_tags``) and the JSON column takes
only what the database can store (:data:`~conversations.admin.fields.STORABLE_JSON`).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from conversations.admin.common import EXCERPT, LeanListMixin, cut, ms_column
from conversations.admin.fields import STORABLE_JSON
from conversations.models import MemoryItem, now_ms
from conversations.tools.memory import normalize_tags
from picobot_site.admin_safety import SafeLookupsMixin


class MemoryItemForm(forms.ModelForm):
    """Tags as the memory tools keep them (``memory.normalize_tags``): a list of strings — blank
    is no tags — or ``memory_search`` could not read the item."""

    class Meta:
        model = MemoryItem
        fields = ["owner", "channel", "chat_id", "content", "tags"]

    def clean_tags(self) -> list[str]:
        tags = self.cleaned_data.get("tags")
        if tags in (None, ""):
            return []
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            raise forms.ValidationError('Tags are a JSON list of strings, e.g. ["work", "family"].')
        return normalize_tags(tags)


@admin.register(MemoryItem)
class MemoryItemAdmin(SafeLookupsMixin, LeanListMixin, admin.ModelAdmin):
    form = MemoryItemForm
    formfield_overrides = STORABLE_JSON
    list_display = ["excerpt", "owner", "channel", "chat_id", "tags", "updated"]
    list_select_related = ["owner"]
    list_filter = ["channel"]
    search_fields = ["content", "chat_id", "owner__username"]
    ordering = ["-updated_at"]
    raw_id_fields = ["owner"]
    fields = ["owner", "channel", "chat_id", "content", "tags", "created", "updated"]
    readonly_fields = ["created", "updated"]
    changelist_defer = ("content",)
    changelist_excerpts = {"content_head": ("content", EXCERPT)}

    def save_model(self, request: HttpRequest, obj: MemoryItem, form: forms.ModelForm, change: bool) -> None:
        obj.updated_at = now_ms()
        super().save_model(request, obj, form, change)

    @admin.display(description="content")
    def excerpt(self, row: MemoryItem) -> str:
        head = getattr(row, "content_head", None)
        return cut(head if head is not None else row.content)

    created = ms_column("created_at", "created")

    updated = ms_column("updated_at", "updated")
