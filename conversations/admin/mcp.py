"""MCP tool servers in the admin (issue 18): the ``McpServer`` rows and a read-only status page.

A stdio server's ``command`` runs code on the server, so only superusers add, change or delete
rows (staff may look). A row is validated by the same parser as the ``[mcp_servers.NAME]``
tables of ``PICOBOT_CONFIG`` (``tools.mcp.config.parse_server``). Secrets are never stored or
shown: ``env_from`` / ``headers_env`` hold variable *names*. The status page
(``/admin/mcp-servers/``) lists every configured server (file and admin) and how it is doing in
each agent worker (``McpServerStatus``, written by the workers). Workers read the rows again every
``PICOBOT_MCP_REFRESH_SECONDS``.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from conversations.admin.common import ms_column
from conversations.admin.fields import STORABLE_JSON
from conversations.models import McpServer, McpServerStatus, now_ms
from conversations.tools.mcp.config import parse_server
from conversations.tools.mcp.sources import STATUS_GONE_MS, read_file_servers
from picobot_site.admin_safety import SafeLookupsMixin


class McpServerForm(forms.ModelForm):
    """The row checked as an ``[mcp_servers.NAME]`` table: the parser's message names the key."""

    class Meta:
        model = McpServer
        fields = [
            "name",
            "enabled",
            "command",
            "args",
            "env",
            "env_from",
            "url",
            "headers_env",
            "tools",
            "timeout",
        ]

    def clean(self) -> dict:
        data = super().clean()
        if self.errors:
            return data
        if data.get("tools") == []:
            self.add_error(
                "tools", "an empty list would offer no tool: leave the field blank for all of them"
            )
            return data
        row = McpServer(**{key: data.get(key) for key in self.Meta.fields})
        for key in ("args",):
            row.args = data.get(key) or []
        for key in ("env", "env_from", "headers_env"):
            setattr(row, key, data.get(key) or {})
        try:
            parse_server(row.name, row.table(), source="admin")
        except ValueError as exc:
            raise forms.ValidationError(str(exc).removeprefix("admin: ")) from None
        return data


@admin.register(McpServer)
class McpServerAdmin(SafeLookupsMixin, admin.ModelAdmin):
    form = McpServerForm
    formfield_overrides = STORABLE_JSON
    list_display = ["name", "enabled", "transport", "target", "updated"]
    search_fields = ["name"]

    @admin.display(description="transport")
    def transport(self, row: McpServer) -> str:
        return "stdio" if row.command else "http"

    @admin.display(description="command or URL")
    def target(self, row: McpServer) -> str:
        return row.target

    updated = ms_column("updated_at", "updated")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return request.user.is_active and request.user.is_staff

    def save_model(self, request: HttpRequest, obj: McpServer, form: forms.ModelForm, change: bool) -> None:
        obj.updated_at = now_ms()
        super().save_model(request, obj, form, change)


def mcp_status(request: HttpRequest) -> HttpResponse:
    """``GET /admin/mcp-servers/``: every configured server and its state in each worker."""
    context = {**admin.site.each_context(request), "title": "MCP servers", "error": "", "servers": []}
    configured: dict[str, dict] = {}
    try:
        for server in read_file_servers():
            configured[server.name] = {"name": server.name, **server.public()}
    except ValueError as exc:
        context["error"] = str(exc)
    for row in McpServer.objects.order_by("name"):
        if row.name not in configured:
            target = row.target
            configured[row.name] = {
                "name": row.name,
                "source": "admin" + ("" if row.enabled else " (disabled)"),
                "transport": "stdio" if row.command else "http",
                "target": target,
            }
    statuses: dict[str, list[McpServerStatus]] = {}
    now = now_ms()
    for status in McpServerStatus.objects.order_by("name", "worker_id"):
        # A worker stamps its rows every minute; older ones are of a worker that died.
        status.unseen_minutes = (
            (now - status.seen_at) // 60_000 if now - status.seen_at > STATUS_GONE_MS else None
        )
        statuses.setdefault(status.name, []).append(status)
        configured.setdefault(
            status.name,
            {
                "name": status.name,
                "source": status.source,
                "transport": status.transport,
                "target": status.target,
            },
        )
    context["servers"] = [
        {**server, "workers": statuses.get(name, [])} for name, server in configured.items()
    ]
    return TemplateResponse(request, "admin/mcp_servers.html", context)


mcp_status_view = admin.site.admin_view(mcp_status)
