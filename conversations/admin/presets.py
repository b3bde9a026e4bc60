"""The model presets in the admin: a read-only page, linked from the admin index (issue 17).

Presets live in the ``PICOBOT_CONFIG`` file, not in the database, so this is a plain admin view
(``admin.site.admin_view``: staff only) showing ``ModelPreset.public()`` — never a key, only
whether the preset's key variable is set. A file that does not load shows its error instead.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from conversations.runtime.provider import model_catalog


def model_presets(request: HttpRequest) -> HttpResponse:
    """``GET /admin/model-presets/``: each preset's provider, model, window, prices, fallbacks."""
    context = {**admin.site.each_context(request), "title": "Model presets", "presets": [], "error": ""}
    try:
        catalog = model_catalog()
    except ValueError as exc:
        context["error"] = str(exc)
    else:
        context["default"] = catalog.default
        context["from_file"] = catalog.from_file
        context["presets"] = [
            {**preset.public(), "api_key_env": preset.api_key_env or "PICOBOT_LLM_API_KEY"}
            for preset in catalog.presets.values()
        ]
    return TemplateResponse(request, "admin/model_presets.html", context)


model_presets_view = admin.site.admin_view(model_presets)
