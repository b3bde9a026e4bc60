"""``/v1`` routes of the OpenAI-compatible endpoint, without trailing slashes as OpenAI's SDKs
call them; any other ``/v1/…`` path answers an OpenAI-shaped 404 (never a redirect)."""

from __future__ import annotations

from django.urls import path, re_path

from conversations.api.openai_compat import views

urlpatterns = [
    path("chat/completions", views.chat_completions, name="openai-chat-completions"),
    path("models", views.models, name="openai-models"),
    path("models/<str:model_id>", views.model, name="openai-model"),
    re_path(r"^(?P<rest>.*)$", views.unknown),
]
