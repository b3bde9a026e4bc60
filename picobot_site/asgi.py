"""ASGI entry point: HTTP (Django + WhiteNoise), the cli_chat WebSocket, and the agent channel.

``daphne picobot_site.asgi:application`` serves HTTP and WebSocket; the agent worker consumer
(``picobot.agent`` channel) is run by ``manage.py serve`` (embedded) or ``manage.py runagent``
(scale-out) through ``conversations.runtime.worker`` — both reach it through the channel layer (DESIGN §2).
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picobot_site.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from conversations.auth import ChatAuthMiddleware  # noqa: E402
from conversations.chat.consumer import ChatConsumer, UnknownPathConsumer  # noqa: E402

websocket_urlpatterns = [
    path("ws/chat/", ChatConsumer.as_asgi()),
    re_path(r"", UnknownPathConsumer.as_asgi()),
]

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": ChatAuthMiddleware(URLRouter(websocket_urlpatterns)),
    }
)
