"""The REST control API (PROTOCOL §2), mounted at ``/api/``: the ``NinjaAPI`` and its routers.

Every view is ``async``: storage calls go through ``run_storage`` (the agent's storage threads,
short calls, bounded retry), channel-layer calls are awaited on the server's loop — nothing here
holds the one thread Django shares between sync views and the async ORM under ASGI (DESIGN §2),
and waits for a worker (``…/turn``, ``…/stop``) cost no thread at all.

The API's own chat is the caller's cli_chat chat (``cli_chat:<user pk>``), the very chat the
WebUI, the TUI and every WebSocket of that user share (``api/README.md``).
"""

from __future__ import annotations

from typing import Any

from ninja import NinjaAPI

from conversations.api import dialogs, media, messages, schedules, service, tasks, turns, usage
from conversations.api.auth import api_auth
from conversations.api.errors import install_error_handlers, limit_body
from conversations.api.methods import answer_other_methods_with_json_405, fallback_router


class PicoBotAPI(NinjaAPI):
    """``NinjaAPI`` whose OpenAPI operation ids are the view names (``send_message``)."""

    def get_openapi_operation_id(self, operation: Any) -> str:
        return operation.view_func.__name__


api = PicoBotAPI(
    title="PicoBot control API",
    version="1",
    description=(
        "The REST control API of PROTOCOL.md §2. Authenticate with an API token "
        "(`Authorization: Bearer <token>`, from `manage.py createtoken`) or the WebUI's session "
        "(writes then need `X-CSRFToken`). Errors are `{code, message, ref}`; bodies over 1 MiB "
        "answer 413. `{session_id}` is a dialog's unified id `{channel}:{chat_id}:{dialog_id}` "
        "(URL-encoded or not)."
    ),
    urls_namespace="picobot_api",
    auth=api_auth(),
)
install_error_handlers(api)
api.add_decorator(limit_body, mode="view")

# Mount order is URL order. A dialog id takes a ``path`` converter (it may arrive with encoded
# characters), so ``/dialogs/{session_id}`` itself comes after every ``/dialogs/{session_id}/…``
# route, which it would otherwise swallow; the catch-all of unknown paths comes last.
ROUTERS = (
    service.router,
    dialogs.router,
    messages.router,
    media.router,
    turns.router,
    schedules.router,
    tasks.router,
    usage.router,
    dialogs.item_router,
    fallback_router,
)
answer_other_methods_with_json_405(ROUTERS)
for _router in ROUTERS:
    api.add_router("", _router)
