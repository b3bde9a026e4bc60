"""The API token admin: tokens by prefix, never their hash (DESIGN §8 "secrets never in admin
list pages").

Adding a token makes it with ``auth.create_token`` and shows the raw token once, in the response
to the add form (never in a message kept in the session or a cookie). A token's name is the only
thing that can change; "Revoke" sets ``revoked_at``.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.template.response import TemplateResponse
from django.urls import reverse

from conversations.admin.common import ms_column
from conversations.auth import create_token
from conversations.auth.tokens import unexpired
from conversations.models import ApiToken, now_ms
from picobot_site.admin_safety import SafeLookupsMixin

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


class ApiTokenAddForm(forms.ModelForm):
    """A token's name as ``createtoken --name`` takes it: printable text (no line breaks, control
    or bidi characters that could disguise it in lists and logs)."""

    class Meta:
        model = ApiToken
        fields = ["user", "name"]

    def clean_name(self) -> str:
        name = self.cleaned_data.get("name") or ""
        if not name.isprintable():
            raise forms.ValidationError(
                "A token name is printable text: no line breaks or control characters."
            )
        return name


class TokenStateFilter(admin.SimpleListFilter):
    """Tokens by state: live (usable now), expired, revoked — as ``tokens.live_token`` decides
    (a live token of a deactivated user is listed live; its user's page says inactive)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("live", "Live"), ("expired", "Expired"), ("revoked", "Revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "live":
            return queryset.filter(unexpired(), revoked_at__isnull=True)
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, expires_at__lte=now_ms())
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(ApiToken)
class ApiTokenAdmin(SafeLookupsMixin, admin.ModelAdmin):
    """Tokens by prefix; the hash is never shown. Adding one shows the raw token once, in the
    response to the add form (not in a message stored in the session or a cookie)."""

    list_display = ["prefix_shown", "name", "user", "created", "last_used", "expires", "state"]
    list_select_related = ["user"]
    list_filter = [TokenStateFilter]
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
        return ["user", "name", "prefix_shown", "created", "last_used", "expires", "revoked_at_shown"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        return ["user", "prefix_shown", "created", "last_used", "expires", "revoked_at_shown"]

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

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None
    ) -> HttpResponse:
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

    expires = ms_column("expires_at", "expires")

    @admin.display(description="state", ordering="revoked_at")
    def state(self, row: ApiToken) -> str:
        """``live``, ``expired`` or ``revoked`` (revoked wins: it is for good)."""
        if row.revoked_at is not None:
            return "revoked"
        if row.expires_at is not None and row.expires_at <= now_ms():
            return "expired"
        return "live"

    revoked_at_shown = ms_column("revoked_at", "revoked at", sortable=False)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=now_ms())
        self.message_user(request, f"{count} token(s) revoked.", messages.SUCCESS)
