"""The REST control API (PROTOCOL §2): django-ninja, mounted at ``/api/`` by ``picobot_site.urls``.

``api`` is the ``NinjaAPI``: OpenAPI at ``/api/openapi.json``, Swagger UI at ``/api/docs``.
Modules: ``routes`` (the endpoints), ``schemas`` (request/response shapes), ``auth`` (API token or
session + CSRF), ``errors`` (``{code, message, ref}`` answers, the 1 MiB body limit), ``queries``
(short DB calls run through ``run_storage``), ``live`` (channel-layer round trips: readiness, a
running turn's snapshot, stop acknowledgements), ``middleware`` (``HEAD``, and JSON 404/405 for
what no route or operation matches).
"""

from conversations.api.routes import api

__all__ = ["api"]
