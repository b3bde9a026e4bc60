"""URL map: the WebUI, login/logout, the Django admin, the REST API, the OpenAI-compatible /v1, the Feishu webhook, the Prometheus scrape. WebSocket routes live in ``asgi.py``."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from conversations.admin.mcp import mcp_status_view
from conversations.admin.presets import model_presets_view
from conversations.api import api
from conversations.chat import views
from conversations.feishu.views import feishu_events
from picobot_site.metrics.views import metrics

urlpatterns = [
    path("", views.chat_page, name="chat"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/model-presets/", model_presets_view, name="admin-model-presets"),
    path("admin/mcp-servers/", mcp_status_view, name="admin-mcp-servers"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("v1/", include("conversations.api.openai_compat.urls")),  # OpenAI-compatible (issue 18)
    path("feishu/events/", feishu_events, name="feishu-events"),
    path("feishu/events", feishu_events),  # as typed in the console without the slash: no redirect
    path("metrics", metrics, name="metrics"),  # Prometheus' default metrics_path (issue 17)
]
