"""Fixtures of the admin tests: a logged-in staff superuser."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model


@pytest.fixture
def staff_client(client: Any) -> Any:
    """A logged-in staff superuser (the admin's operator)."""
    user = get_user_model().objects.create_superuser("operator", password="pw-for-tests")
    client.force_login(user)
    return client
