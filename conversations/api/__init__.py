"""The REST control API (PROTOCOL §2): django-ninja, mounted at ``/api/`` by ``picobot_site.urls``.

``api`` is the ``NinjaAPI`` (``routes``): OpenAPI at ``/api/openapi.json``, Swagger UI at
``/api/docs``. What each module holds: ``README.md``.
"""

from conversations.api.routes import api

__all__ = ["api"]
