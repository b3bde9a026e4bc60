from __future__ import annotations

from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    """Turn model, delivery coordination and platform sinks (DESIGN §4)."""

    name = "delivery"
    default_auto_field = "django.db.models.BigAutoField"
