"""What every PicoBot model admin shares: columns, lean change lists, list filters, read-only rows.

Times are ms since the epoch in the database and UTC text on the page (``ms_column``). Content in
lists is an excerpt of :data:`EXCERPT` characters; media lists show their size, never their base64
data. A model admin with :class:`LeanListMixin` lists rows without its ``changelist_defer``
columns and with its ``changelist_excerpts`` cut by the database (README "Lean change lists").
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.functions import Substr
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from conversations.models import ChatState, Message, now_ms

EXCERPT = 120  # characters of content shown in lists
DAY_MS = 86_400_000


# --- columns and cell text --------------------------------------------------------------------


def ms_column(field: str, description: str, *, sortable: bool = True) -> Any:
    """An admin column showing the ms-since-epoch ``field`` as UTC text ("—" when null),
    sortable by it unless ``sortable`` is False."""

    def show(self: Any, row: Any) -> str:
        return ms_to_text(getattr(row, field))

    show.__name__ = field
    return admin.display(description=description, ordering=field if sortable else None)(show)


def ms_to_text(ms: int | None) -> str:
    """``2024-05-01 12:00:00 UTC`` for ms since the epoch, "—" for None."""
    if ms is None:
        return "—"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def cut(text: str | None, limit: int = EXCERPT) -> str:
    """``text`` on one line, at most ``limit`` characters (ending in "…" when cut); "" for none."""
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def media_summary(media: Any) -> str:
    """``image/png 12 KiB, …`` for a media list, never its base64 data."""
    if not media:
        return "—"
    parts = []
    for item in media if isinstance(media, list) else []:
        if isinstance(item, dict):
            size = len(str(item.get("data", ""))) * 3 // 4
            parts.append(f"{item.get('mime_type', '?')} {max(1, size // 1024)} KiB")
    return ", ".join(parts) or "—"


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON in a ``<pre>`` block (HTML-escaped)."""
    return format_html(
        "<pre style='white-space:pre-wrap;margin:0'>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False)
    )


def message_role(row: Message) -> str:
    """A history row's role; a tool result also names its tool and whether it failed."""
    if row.role == Message.Role.TOOL:
        return f"tool {row.tool_name or ''}{' (error)' if row.is_error else ''}".strip()
    return row.role


def link_to_dialog(row: Any) -> str:
    """A link to the change page of ``row.dialog`` (by its title, cut, or its id; "(deleted)" after
    it when the dialog is soft-deleted)."""
    url = reverse("admin:conversations_dialog_change", args=[row.dialog_id])
    gone = " (deleted)" if row.dialog.deleted_at is not None else ""
    return format_html('<a href="{}">{}</a>{}', url, cut(row.dialog.title, 40) or row.dialog_id, gone)


# --- lean change lists, read-only rows --------------------------------------------------------


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
            qs = qs.annotate(
                **{name: Substr(field, 1, chars + 1) for name, (field, chars) in excerpts.items()}
            )
        return qs


class LeanListMixin:
    """Lists rows with :class:`LeanChangeList`: set ``changelist_defer`` and ``changelist_excerpts``."""

    changelist_defer: tuple[str, ...] = ()
    changelist_excerpts: dict[str, tuple[str, int]] = {}

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return LeanChangeList


class ReadOnlyMixin:
    """Rows written by the agent only: browse, never add, change or delete (DESIGN §3)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --- list filters -----------------------------------------------------------------------------


def age_filter(field: str, label: str) -> type[admin.SimpleListFilter]:
    """A list filter on an ms timestamp column (the admin's date hierarchy needs a DateField)."""

    class AgeFilter(admin.SimpleListFilter):
        title = label
        parameter_name = field

        def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
            return [
                ("1", "Past 24 hours"),
                ("7", "Past 7 days"),
                ("30", "Past 30 days"),
                ("-30", "Older than 30 days"),
                ("-365", "Older than a year"),
            ]

        def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
            value = self.value()
            if value not in {"1", "7", "30", "-30", "-365"}:
                return queryset
            days = int(value)
            cutoff = now_ms() - abs(days) * DAY_MS
            return queryset.filter(**{f"{field}__gte" if days > 0 else f"{field}__lt": cutoff})

    AgeFilter.__name__ = f"{field.title().replace('_', '')}Filter"
    return AgeFilter


def set_filter(
    field: str, title: str, unset_label: str, set_label: str, doc: str
) -> type[admin.SimpleListFilter]:
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


DeletedFilter = set_filter(
    "deleted_at",
    "deleted",
    "Live",
    "Deleted",
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
