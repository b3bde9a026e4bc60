"""First-start conveniences for the embedded mode (``manage.py serve``)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from conversations.auth import create_token

FIRST_USERNAME = "admin"


def ensure_first_user() -> tuple[str, str] | None:
    """On an empty user table create a staff superuser ``admin`` and return ``(name, token)``.

    The user has no password; the returned API token (shown once by ``serve``) logs in to the
    WebUI and the admin. Returns None when any user already exists. Touches the DB.
    """
    model = get_user_model()
    if model.objects.exists():
        return None
    user = model(username=FIRST_USERNAME, is_staff=True, is_superuser=True)
    user.set_unusable_password()
    user.save()
    return FIRST_USERNAME, create_token(user, name="first start")


def undo_first_user(username: str) -> None:
    """Delete the first-start user ``username`` made by :func:`ensure_first_user` in a start that
    then failed before its token was shown (``serve``); the next start makes a new one. Touches
    the DB; a user that meanwhile owns dialogs is left alone."""
    get_user_model().objects.filter(username=username, dialogs__isnull=True).delete()
