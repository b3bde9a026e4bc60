"""Admin form fields for JSON columns: only what the database can store goes in (Django glue).

A model admin with editable JSON columns sets ``formfield_overrides = STORABLE_JSON``.

Django's ``forms.JSONField`` reads ``NaN``/``Infinity``, keeps the last of duplicate keys and
lets ``"\\u0000"`` and ``"\\ud800"`` escapes through: PostgreSQL then refuses the write (a 500 in
the admin), SQLite stores a lone surrogate that later breaks every page showing the value. This
field applies the import's rules instead (``transfer.strict_json.loads_strict`` and
``transfer.strict_json.check_storable_json``): such input is a form error naming the place. A form shown
again with errors shows the text as typed, and a stored value that holds a lone surrogate (one
written without these rules) is shown with U+FFFD instead of failing the page.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.db import models
from django.forms.fields import InvalidJSONInput

from conversations.transfer.errors import TransferError
from conversations.transfer.strict_json import check_storable_json, loads_strict
from providers.unicode_text import fix_surrogates


class StorableJSONField(forms.JSONField):
    """A ``forms.JSONField`` that accepts only standard JSON the database can store as it is."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            value = ""  # only spaces or line breaks: blank, as an empty field
        if self.disabled or value in self.empty_values:
            return super().to_python(value)
        if not isinstance(value, str):
            parsed = value
        else:
            try:
                parsed = loads_strict(value)
            except TransferError as exc:
                raise forms.ValidationError(f"Enter standard JSON: the text {exc}.", code="invalid") from None
        try:
            check_storable_json(parsed)
        except TransferError as exc:
            raise forms.ValidationError(f"Cannot be stored: {exc}.", code="invalid") from None
        return parsed

    def bound_data(self, data: Any, initial: Any) -> Any:
        if self.disabled:
            return initial
        if isinstance(data, str):
            return InvalidJSONInput(data)  # shown again exactly as typed (UTF-8 from the form)
        return super().bound_data(data, initial)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, InvalidJSONInput):
            return value
        return fix_surrogates(json.dumps(value, ensure_ascii=False, cls=self.encoder))


STORABLE_JSON = {models.JSONField: {"form_class": StorableJSONField}}
"""``formfield_overrides`` for a model admin: its editable JSON columns take only what the database
can store."""
