"""Admin change lists refuse hand-made filter parameters cleanly (Django glue).

Django's admin lets any lookup on a model's own fields through a list page's query string
(``?title__regex=[``, ``?created_at__range=1``, ``?tags__contains=x`` on SQLite): a regex the
database cannot compile, a malformed range or a lookup the backend lacks raised a 500, and JSON
lookups let staff probe what the lists never show (``?provider_state__has_key=…``).
:class:`SafeLookupsMixin` refuses regex lookups and any lookup into a JSON column (400, Django's
``DisallowedModelAdminLookup``), and turns a lookup that still fails into the admin's usual
"incorrect parameters" answer (a redirect to ``?e=1``).
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import FieldDoesNotExist
from django.db import DatabaseError, models
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest

REFUSED_LOOKUPS = frozenset({"regex", "iregex"})


class SafeLookupsMixin:
    """For every ``ModelAdmin`` of the project (module docstring)."""

    model: type[models.Model]

    def lookup_allowed(self, lookup: str, value: Any, request: HttpRequest | None = None) -> bool:
        parts = lookup.split(LOOKUP_SEP)
        if parts[-1] in REFUSED_LOOKUPS:
            return False
        try:
            field = self.model._meta.get_field(parts[0])
        except FieldDoesNotExist:
            field = None
        if isinstance(field, models.JSONField):
            return False
        return super().lookup_allowed(lookup, value, request)  # type: ignore[misc]

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        try:
            return super().get_changelist_instance(request)  # type: ignore[misc]
        except (DatabaseError, IndexError, TypeError, ValueError) as exc:
            # The query the parameters made cannot run here: the admin's "?e=1" answer.
            raise IncorrectLookupParameters(str(exc)) from exc
