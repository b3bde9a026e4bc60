"""PicoBot in the Django admin: dialogs and their history, messages, the inbox, API tokens, memory
items and plans (issue 7; DESIGN §3 data model, §8 "secrets never in admin list pages", §9 the
admin is staff-only — Django's admin site already refuses non-staff users).

Fast on big tables: list pages show columns of their own row (counts come from the dialog row's
counters, never a COUNT per row), join what they show with ``list_select_related``, and never
load the big JSON/text columns (``provider_state``, ``media_refs`` with base64 images, full
content: excerpts are cut by the database with ``Substr``). A dialog's history inline shows a
window of :data:`HISTORY_PAGE` rows in ``seq`` order (``?history_from=SEQ`` pages through it);
the Message list, filtered by dialog, pages through all of it.

Writes go through the storage service semantics: a title edited in the dialog form is a user
rename (``storage.rename_dialog``: ``title_is_default=False``, ``state_version`` bumped; the
chat's open clients get ``session_changed``), and no dialog row is ever saved whole (that would
overwrite counters a running turn just committed). A plan is checked with the plan tool's rules.

Dialogs, history and inbox rows cannot be deleted here (the confirmation page would list every
history row; users ``/delete``, ``manage.py purge`` removes). So a user who owns dialogs cannot be
deleted here either: ``manage.py purge --user USERNAME --apply`` first (README).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db import models
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Substr
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from conversations import storage
from conversations.admin_fields import StorableJSONField
from conversations.auth import create_token
from conversations.models import ApiToken, ChatState, Dialog, InboxMessage, MemoryItem, Message, Plan, now_ms
from conversations.runtime import notify
from conversations.runtime.notify import session_changed
from conversations.tools.memory import normalize_tags
from conversations.transfer import clean_plan_content
from picobot_site.admin_safety import SafeLookupsMixin

log = logging.getLogger(__name__)

HISTORY_PAGE = 200  # history rows shown at once in a dialog's change page
EXCERPT = 120  # characters of content shown in lists
DAY_MS = 86_400_000


def ms_column(field: str, description: str, *, sortable: bool = True) -> Any:
    """An admin column showing the ms-since-epoch ``field`` as UTC text ("—" when null),
    sortable by it unless ``sortable`` is False."""

    def show(self: Any, row: Any) -> str:
        return _ms_to_text(getattr(row, field))

    show.__name__ = field
    return admin.display(description=description, ordering=field if sortable else None)(show)


def _ms_to_text(ms: int | None) -> str:
    if ms is None:
        return "—"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cut(text: str | None, limit: int = EXCERPT) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _media_summary(media: Any) -> str:
    """``image/png 12 KiB, …`` for a media list, never its base64 data."""
    if not media:
        return "—"
    parts = []
    for item in media if isinstance(media, list) else []:
        if isinstance(item, dict):
            size = len(str(item.get("data", ""))) * 3 // 4
            parts.append(f"{item.get('mime_type', '?')} {max(1, size // 1024)} KiB")
    return ", ".join(parts) or "—"


def _pretty_json(value: Any) -> str:
    return format_html("<pre style='white-space:pre-wrap;margin:0'>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))


class LeanChangeList(ChangeList):
    """A ChangeList whose rows skip the model admin's ``changelist_defer`` columns and carry its
    ``changelist_excerpts`` (``{name: (field, chars)}``) cut by the database."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet:
        qs = super().get_queryset(request, exclude_parameters)
        admin_ = self.model_admin
        if getattr(admin_, "changelist_defer", ()):
            qs = qs.defer(*admin_.changelist_defer)
        excerpts = getattr(admin_, "changelist_excerpts", {})
        if excerpts:
            qs = qs.annotate(**{name: Substr(field, 1, chars + 1) for name, (field, chars) in excerpts.items()})
        return qs


class LeanListMixin:
    changelist_defer: tuple[str, ...] = ()
    changelist_excerpts: dict[str, tuple[str, int]] = {}

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return LeanChangeList


def _age_filter(field: str, label: str) -> type[admin.SimpleListFilter]:
    """A list filter on an ms timestamp column (the admin's date hierarchy needs a DateField)."""

    class AgeFilter(admin.SimpleListFilter):
        title = label
        parameter_name = field

        def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
            return [("1", "Past 24 hours"), ("7", "Past 7 days"), ("30", "Past 30 days"), ("-30", "Older than 30 days"),
                    ("-365", "Older than a year")]

        def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
            value = self.value()
            if value not in {"1", "7", "30", "-30", "-365"}:
                return queryset
            days = int(value)
            cutoff = now_ms() - abs(days) * DAY_MS
            return queryset.filter(**{f"{field}__gte" if days > 0 else f"{field}__lt": cutoff})

    AgeFilter.__name__ = f"{field.title().replace('_', '')}Filter"
    return AgeFilter


def _set_filter(field: str, title: str, unset_label: str, set_label: str, doc: str) -> type[admin.SimpleListFilter]:
    """A list filter on whether a nullable time column (``deleted_at``, ``revoked_at``) is set."""

    class SetFilter(admin.SimpleListFilter):
        parameter_name = title

        def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
            return [("no", unset_label), ("yes", set_label)]

        def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
            if self.value() in ("yes", "no"):
                return queryset.filter(**{f"{field}__isnull": self.value() == "no"})
            return queryset

    SetFilter.title = title
    SetFilter.__doc__ = doc
    SetFilter.__name__ = f"{title.title()}Filter"
    return SetFilter


DeletedFilter = _set_filter(
    "deleted_at", "deleted", "Live", "Deleted",
    "Deleted = soft-deleted by ``/delete`` (``deleted_at`` set; ``purge`` removes it later).",
)


class ActiveFilter(admin.SimpleListFilter):
    """Active = the dialog its chat's new messages go to (``ChatState.active_dialog``)."""

    title = "active in its chat"
    parameter_name = "active"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("yes", "Active"), ("no", "Not active")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        active = Exists(ChatState.objects.filter(active_dialog=OuterRef("pk")))
        if self.value() == "yes":
            return queryset.filter(active)
        if self.value() == "no":
            return queryset.filter(~active)
        return queryset


# --- Dialog and its history -------------------------------------------------------------------


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
        "seq", "who", "content_excerpt", "tool_calls_shown", "reasoning_excerpt", "completion_status", "created",
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
            .annotate(content_head=Substr("content", 1, 241), reasoning_head=Substr("reasoning_content", 1, 161))
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
        return _who(row)

    @admin.display(description="content")
    def content_excerpt(self, row: Message) -> str:
        return _cut(getattr(row, "content_head", None), 240)

    @admin.display(description="reasoning")
    def reasoning_excerpt(self, row: Message) -> str:
        return _cut(getattr(row, "reasoning_head", None), 160)

    @admin.display(description="tool calls")
    def tool_calls_shown(self, row: Message) -> str:
        return _tool_calls_html(row.tool_calls)

    created = ms_column("created_at", "created", sortable=False)


def _who(row: Message) -> str:
    if row.role == Message.Role.TOOL:
        return f"tool {row.tool_name or ''}{' (error)' if row.is_error else ''}".strip()
    return row.role


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
        items.append((call.get("name", "?"), _cut(str(args), 160)))
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
        "title", "id", "channel", "owner", "message_count", "total_message_count", "last_active", "deleted",
    ]
    list_select_related = ["owner"]
    list_filter = ["channel", ActiveFilter, DeletedFilter, _age_filter("last_active_at", "last active"),
                   _age_filter("created_at", "created")]
    # The search also looks in message content (``get_search_results``).
    search_fields = ["title", "id"]
    search_help_text = "Title, id (channel:chat_id:dialog_id) or words of a message."
    ordering = ["-last_active_at"]
    show_full_result_count = False
    changelist_defer = ("summary",)
    inlines = [HistoryInline]
    fieldsets = [
        (None, {"fields": ["title", "title_is_default", "id", "channel", "chat_id", "dialog_id", "owner", "active"]}),
        ("Activity", {"fields": [
            "created", "last_active", "deleted", "message_count", "total_message_count", "history_revision",
            "state_version", "model", "usage",
        ]}),
        ("Runtime", {"classes": ["collapse"], "fields": [
            "lease", "summary_seq", "summary", "auto_compact_failures", "title_attempted_at", "inbox_position",
        ]}),
        ("History", {"fields": ["history_pages"]}),
    ]
    readonly_fields = [
        "title_is_default", "id", "channel", "chat_id", "dialog_id", "owner", "active", "created", "last_active",
        "deleted", "message_count", "total_message_count", "history_revision", "state_version", "model", "usage",
        "lease", "summary_seq", "summary", "auto_compact_failures", "title_attempted_at", "inbox_position",
        "history_pages",
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("owner")

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
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
            self.message_user(request, "The dialog was deleted meanwhile; the title was not changed.", messages.ERROR)
            return
        except ValueError as exc:  # pragma: no cover - the form checked it
            self.message_user(request, str(exc), messages.ERROR)
            return
        # As /rename and PATCH: the chat's open clients see the new title (best effort).
        active = ChatState.objects.filter(channel=dialog.channel, chat_id=dialog.chat_id, active_dialog=dialog).exists()
        try:
            async_to_sync(notify.publish_frame)(dialog.channel, dialog.chat_id, session_changed(dialog, active=active))
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
        return f"{row.lease_owner}, epoch {row.lease_epoch}, expires {_ms_to_text(row.lease_expires_at)}"

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
            shown, nav, messages_url, row.total_message_count,
        )


# --- Message, InboxMessage --------------------------------------------------------------------


class ReadOnlyMixin:
    """Rows written by the agent only: browse, never add, change or delete (DESIGN §3)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


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
        "content", "reasoning_content", "provider_state", "media_refs", "tool_calls", "source", "dialog__summary",
    )
    changelist_excerpts = {"content_head": ("content", EXCERPT)}
    fields = [
        "dialog", "seq", "role", "tool_name", "tool_call_id", "is_error", "completion_status", "turn_id", "iteration",
        "created", "content", "reasoning_content", "tool_calls_shown", "media_shown", "source_shown",
        "provider_state_shown",
    ]
    readonly_fields = fields

    @admin.display(description="dialog", ordering="dialog")
    def dialog_link(self, row: Message) -> str:
        url = reverse("admin:conversations_dialog_change", args=[row.dialog_id])
        return format_html('<a href="{}">{}</a>', url, _cut(row.dialog.title, 40) or row.dialog_id)

    @admin.display(description="role", ordering="role")
    def who(self, row: Message) -> str:
        return _who(row)

    @admin.display(description="content")
    def excerpt(self, row: Message) -> str:
        head = getattr(row, "content_head", None)
        return _cut(head if head is not None else row.content)

    created = ms_column("created_at", "created")

    @admin.display(description="tool calls")
    def tool_calls_shown(self, row: Message) -> str:
        return _pretty_json(row.tool_calls) if row.tool_calls else "—"

    @admin.display(description="media")
    def media_shown(self, row: Message) -> str:
        return _media_summary(row.media_refs)

    @admin.display(description="source")
    def source_shown(self, row: Message) -> str:
        return _pretty_json(row.source) if row.source else "—"

    @admin.display(description="provider state (server only)")
    def provider_state_shown(self, row: Message) -> str:
        return _pretty_json(row.provider_state) if row.provider_state is not None else "—"


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
        "dialog_id", "position", "status", "user", "client_msg_id", "received", "started", "finished", "turn_id",
        "reply_message_id", "error", "content", "media_shown", "source", "notice_sent_at",
    ]
    readonly_fields = fields

    received = ms_column("received_at", "received")

    started = ms_column("started_at", "started", sortable=False)

    finished = ms_column("finished_at", "finished", sortable=False)

    @admin.display(description="content")
    def excerpt(self, row: InboxMessage) -> str:
        head = getattr(row, "content_head", None)
        return _cut(head if head is not None else row.content)

    @admin.display(description="media")
    def media_shown(self, row: InboxMessage) -> str:
        return _media_summary(row.media)


# --- API tokens ------------------------------------------------------------------------------

_TOKEN_PAGE = engines["django"].from_string(
    """{% extends "admin/base_site.html" %}
{% block breadcrumbs %}<div class="breadcrumbs"><a href="{% url 'admin:index' %}">Home</a>
&rsaquo; <a href="{{ changelist_url }}">API tokens</a> &rsaquo; {{ token_obj.prefix }}…</div>{% endblock %}
{% block content %}<div id="content-main">
<p>New API token for <strong>{{ token_obj.user }}</strong>{% if token_obj.name %} ({{ token_obj.name }}){% endif %}.
Copy it now: it is shown <strong>once</strong>. Only its hash is kept; a lost token cannot be recovered
(revoke it and create another).</p>
<p><code id="new-api-token" style="font-size:1.2em;user-select:all">{{ token }}</code></p>
<p>Use it as <code>Authorization: Bearer &lt;token&gt;</code>, as <code>?token=&lt;token&gt;</code> on the
WebSocket, or as the password on the WebUI login page.</p>
<p><a href="{{ changelist_url }}">Back to API tokens</a></p>
</div>{% endblock %}"""
)


RevokedFilter = _set_filter("revoked_at", "revoked", "Usable", "Revoked", "Tokens by whether they were revoked.")


class ApiTokenAddForm(forms.ModelForm):
    """A token's name as ``createtoken --name`` takes it: printable text (no line breaks, control
    or bidi characters that could disguise it in lists and logs)."""

    class Meta:
        model = ApiToken
        fields = ["user", "name"]

    def clean_name(self) -> str:
        name = self.cleaned_data.get("name") or ""
        if not name.isprintable():
            raise forms.ValidationError("A token name is printable text: no line breaks or control characters.")
        return name


@admin.register(ApiToken)
class ApiTokenAdmin(SafeLookupsMixin, admin.ModelAdmin):
    """Tokens by prefix; the hash is never shown. Adding one shows the raw token once, in the
    response to the add form (not in a message stored in the session or a cookie)."""

    list_display = ["prefix_shown", "name", "user", "created", "last_used", "revoked"]
    list_select_related = ["user"]
    list_filter = [RevokedFilter]
    search_fields = ["=prefix", "name", "user__username"]
    ordering = ["-created_at"]
    autocomplete_fields = ["user"]
    actions = ["revoke"]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = ApiTokenAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return ["user", "name"]
        return ["user", "name", "prefix_shown", "created", "last_used", "revoked_at_shown"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        return ["user", "prefix_shown", "created", "last_used", "revoked_at_shown"]

    def save_model(self, request: HttpRequest, obj: ApiToken, form: forms.ModelForm, change: bool) -> None:
        if change:
            ApiToken.objects.filter(pk=obj.pk).update(name=obj.name)  # never write back last_used_at
            return
        raw = create_token(obj.user, name=obj.name)
        saved = ApiToken.objects.get(token_hash=ApiToken.hash_token(raw))
        for field in ("id", "prefix", "token_hash", "created_at"):
            setattr(obj, field, getattr(saved, field))
        obj._state.adding = False
        request._picobot_new_token = raw  # type: ignore[attr-defined]  # for response_add only

    def response_add(self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None) -> HttpResponse:
        raw = getattr(request, "_picobot_new_token", None)
        if raw is None:  # pragma: no cover - save_model always sets it
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "title": "API token created",
            "token": raw,
            "token_obj": obj,
            "opts": self.opts,
            "changelist_url": reverse("admin:conversations_apitoken_changelist"),
        }
        return TemplateResponse(request, _TOKEN_PAGE, context)

    @admin.display(description="prefix", ordering="prefix")
    def prefix_shown(self, row: ApiToken) -> str:
        return f"{row.prefix}…"

    created = ms_column("created_at", "created")

    last_used = ms_column("last_used_at", "last used")

    @admin.display(description="revoked", boolean=True, ordering="revoked_at")
    def revoked(self, row: ApiToken) -> bool:
        return row.revoked_at is not None

    revoked_at_shown = ms_column("revoked_at", "revoked at", sortable=False)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=now_ms())
        self.message_user(request, f"{count} token(s) revoked.", messages.SUCCESS)


# --- memory and plans ------------------------------------------------------------------------

STORABLE_JSON = {models.JSONField: {"form_class": StorableJSONField}}
"""Editable JSON columns take only what the database can store (``admin_fields``)."""


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
        return _cut(head if head is not None else row.content)

    created = ms_column("created_at", "created")

    updated = ms_column("updated_at", "updated")


class PlanForm(forms.ModelForm):
    """The plan's content is checked with the plan tool's own rules (``transfer.clean_plan_content``)
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
        url = reverse("admin:conversations_dialog_change", args=[row.dialog_id])
        return format_html('<a href="{}">{}</a>', url, _cut(row.dialog.title, 40) or row.dialog_id)

    @admin.display(description="plan")
    def excerpt(self, row: Plan) -> str:
        return _cut(json.dumps(row.content, ensure_ascii=False), 160)

    updated = ms_column("updated_at", "updated")
