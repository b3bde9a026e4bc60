"""The WebUI page (a Django template + static JS; the page talks PROTOCOL.md §1 over /ws/chat/)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from conversations.runtime.provider import provider_info


@login_required
def chat_page(request: HttpRequest) -> HttpResponse:
    """Render the chat UI for the logged-in user (the WebSocket authenticates by the same cookie)."""
    return render(request, "chat.html", {"ws_path": "/ws/chat/", "provider": provider_info()})
