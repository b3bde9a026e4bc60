"""The dialog admin: a dialog's settings, activity and a window of its history (DESIGN §3).

Only the title is editable, as a user rename (``storage.rename_dialog``: ``title_is_default``
cleared, ``state_version`` bumped, the chat's open clients get ``session_changed``); the row is
never saved whole, which would overwrite counters a running turn just committed. The history
inline shows :data:`HISTORY_PAGE` rows from ``?history_from=SEQ`` in ``seq`` order, read-only;
the message list, filtered by the dialog, pages through all of it. Dialogs cannot be added or
deleted here (chats make them, ``manage.py purge`` removes them).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Substr
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from conversations import storage
from conversations.admin.common import (
    ActiveFilter,
    DeletedFilter,
    LeanListMixin,
    age_filter,
    cut,
    message_role,
    ms_column,
    ms_to_text,
)
from conversations.models import ChatState, Dialog, Message
from conversations.runtime import notify
from conversations.runtime.notify import session_changed
from picobot_site.admin_safety import SafeLookupsMixin

log = logging.getLogger(__name__)

HISTORY_PAGE = 200  # history rows shown at once in a dialog's change page


class HistoryWindowFormSet(BaseInlineFormSet):
    """The dialog's history rows ``seq >= start_seq``, at most :data:`HISTORY_PAGE`, seq order."""

    start_seq = 1

    def get_queryset(self) -> list[Message]:
        if not hasattr(self, "_window"):
            rows = self.queryset.filter(seq__gte=self.start_seq).order_by("seq")
            self._window = list(rows[:HISTORY_PAGE])
        return self._window


class HistoryInline(admin.TabularInline):
    """Read-only history of a dialog (a window of it: see ``DialogAdmin.history_pages``)."""

    model = Message
    fk_name = "dialog"
    verbose_name = "history row"
    verbose_name_plural = f"history (up to {HISTORY_PAGE} rows from the window's first seq)"
    fields = readonly_fields = [
        "seq",
        "who",
        "content_excerpt",
        "tool_calls_shown",
        "reasoning_excerpt",
        "completion_status",
        "created",
    ]
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True
    classes = ["history-inline"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return (
            super()
            .get_queryset(request)
            .defer("content", "reasoning_content", "provider_state", "media_refs", "source")
            .annotate(
                content_head=Substr("content", 1, 241), reasoning_head=Substr("reasoning_content", 1, 161)
            )
        )

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        start = _history_start(request)
        kwargs["formset"] = type("HistoryWindow", (HistoryWindowFormSet,), {"start_seq": start})
        return super().get_formset(request, obj, **kwargs)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="role")
    def who(self, row: Message) -> str:
        return message_role(row)

    @admin.display(description="content")
    def content_excerpt(self, row: Message) -> str:
        return cut(getattr(row, "content_head", None), 240)

    @admin.display(description="reasoning")
    def reasoning_excerpt(self, row: Message) -> str:
        return cut(getattr(row, "reasoning_head", None), 160)

    @admin.display(description="tool calls")
    def tool_calls_shown(self, row: Message) -> str:
        return _tool_calls_html(row.tool_calls)

    created = ms_column("created_at", "created", sortable=False)


def _tool_calls_html(calls: Any) -> str:
    if not calls:
        return ""
    items = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        args = call.get("raw_arguments")
        if args is None:
            args = json.dumps(call.get("arguments"), ensure_ascii=False)
        items.append((call.get("name", "?"), cut(str(args), 160)))
    return format_html_join(mark_safe("<br>"), "<code>{}({})</code>", items)


def _history_start(request: HttpRequest) -> int:
    try:
        return max(1, int(request.GET.get("history_from", "1")))
    except ValueError:
        return 1


class DialogForm(forms.ModelForm):
    """Only the title is editable; it is checked like ``/rename`` (``storage.clean_user_title``)."""

    class Meta:
        model = Dialog
        fields = ["title"]

    def clean_title(self) -> str:
        if self.instance.deleted_at is not None and self.cleaned_data["title"] != self.instance.title:
            raise forms.ValidationError("A deleted dialog cannot be renamed.")
        try:
            return storage.clean_user_title(self.cleaned_data["title"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc


@admin.register(Dialog)
class DialogAdmin(SafeLookupsMixin, LeanListMixin, admin.ModelAdmin):
    form = DialogForm
    list_display = [
        "title",
        "id",
        "channel",
        "owner",
        "message_count",
        "total_message_count",
        "last_active",
        "deleted",
    ]
    list_select_related = ["owner"]
    list_filter = [
        "channel",
        ActiveFilter,
        DeletedFilter,
        age_filter("last_active_at", "last active"),
        age_filter("created_at", "created"),
    ]
    # The search also looks in message content (``get_search_results``).
    search_fields = ["title", "id"]
    search_help_text = "Title, id (channel:chat_id:dialog_id) or words of a message."
    ordering = ["-last_active_at"]
    show_full_result_count = False
    changelist_defer = ("summary",)
    inlines = [HistoryInline]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "title",
                    "title_is_default",
                    "id",
                    "channel",
                    "chat_id",
                    "dialog_id",
                    "owner",
                    "active",
                ]
            },
        ),
        (
            "Activity",
            {
                "fields": [
                    "created",
                    "last_active",
                    "deleted",
                    "message_count",
                    "total_message_count",
                    "history_revision",
                    "state_version",
                    "model",
                    "usage",
                ]
            },
        ),
        (
            "Runtime",
            {
                "classes": ["collapse"],
                "fields": [
                    "lease",
                    "summary_seq",
                    "summary",
                    "auto_compact_failures",
                    "title_attempted_at",
                    "inbox_position",
                ],
            },
        ),
        ("History", {"fields": ["history_pages"]}),
    ]
    readonly_fields = [
        "title_is_default",
        "id",
        "channel",
        "chat_id",
        "dialog_id",
        "owner",
        "active",
        "created",
        "last_active",
        "deleted",
        "message_count",
        "total_message_count",
        "history_revision",
        "state_version",
        "model",
        "usage",
        "lease",
        "summary_seq",
        "summary",
        "auto_compact_failures",
        "title_attempted_at",
        "inbox_position",
        "history_pages",
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("owner")

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        """Title or id contains the term, or one of the dialog's messages does (an EXISTS
        subquery: no join, no duplicates, no DISTINCT)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        in_history = Exists(Message.objects.filter(dialog=OuterRef("pk"), content__icontains=term))
        return queryset.filter(Q(title__icontains=term) | Q(id__icontains=term) | Q(in_history)), False

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            obj._history_start = _history_start(request)
        return obj

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # dialogs are made by chats (/new, first message) or ``manage.py import``

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The confirmation page would list every history row; users /delete, ``purge`` removes.
        return False

    def save_model(self, request: HttpRequest, obj: Dialog, form: forms.ModelForm, change: bool) -> None:
        """Only a changed title is written, as a user rename (never ``obj.save()``: that would
        write back every counter as read when the form was opened)."""
        if "title" not in form.changed_data:
            return
        try:
            dialog = storage.rename_dialog(obj.owner, obj.pk, obj.title)
        except storage.NotFoundError:
            self.message_user(
                request, "The dialog was deleted meanwhile; the title was not changed.", messages.ERROR
            )
            return
        except ValueError as exc:  # pragma: no cover - the form checked it
            self.message_user(request, str(exc), messages.ERROR)
            return
        # As /rename and PATCH: the chat's open clients see the new title (best effort).
        active = ChatState.objects.filter(
            channel=dialog.channel, chat_id=dialog.chat_id, active_dialog=dialog
        ).exists()
        try:
            async_to_sync(notify.publish_frame)(
                dialog.channel, dialog.chat_id, session_changed(dialog, active=active)
            )
        except Exception:
            log.warning("could not tell the chat of %s about its new title", dialog.pk, exc_info=True)

    last_active = ms_column("last_active_at", "last active")

    created = ms_column("created_at", "created")

    @admin.display(description="deleted", boolean=True, ordering="deleted_at")
    def deleted(self, row: Dialog) -> bool:
        return row.deleted_at is not None

    @admin.display(description="active in its chat", boolean=True)
    def active(self, row: Dialog) -> bool:
        return ChatState.objects.filter(active_dialog=row).exists()

    @admin.display(description="tokens used")
    def usage(self, row: Dialog) -> str:
        return f"{row.usage_input_tokens} in / {row.usage_output_tokens} out"

    @admin.display(description="lease")
    def lease(self, row: Dialog) -> str:
        if not row.lease_owner:
            return f"free (epoch {row.lease_epoch})"
        return f"{row.lease_owner}, epoch {row.lease_epoch}, expires {ms_to_text(row.lease_expires_at)}"

    @admin.display(description="history")
    def history_pages(self, row: Dialog) -> str:
        """Where the inline's window is, links to move it, and the full paginated message list."""
        last = row.history_revision
        start = min(getattr(row, "_history_start", 1), max(1, last))
        end = min(last, start + HISTORY_PAGE - 1)
        messages_url = reverse("admin:conversations_message_changelist") + f"?dialog__id__exact={row.pk}"
        links = []
        if start > 1:
            links.append(("?history_from=1", "first"))
            links.append((f"?history_from={max(1, start - HISTORY_PAGE)}", "previous"))
        if end < last:
            links.append((f"?history_from={end + 1}", "next"))
            links.append((f"?history_from={max(1, last - HISTORY_PAGE + 1)}", "last"))
        nav = format_html_join(" · ", '<a href="{}">{}</a>', links)
        shown = f"seq {start}–{end} of {last}" if last else "no history yet"
        return format_html(
            '{} shown below. {} <br><a href="{}">All {} rows as a paginated, searchable list</a>',
            shown,
            nav,
            messages_url,
            row.total_message_count,
        )
