"""The admin's operator (a logged-in staff superuser) for the NUL refusal of test_nul_urls.py."""

from tests.conversations.admin.conftest import staff_client  # noqa: F401 - a fixture here
