"""``manage.py revoketoken`` (DESIGN §9 per-user API tokens)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from conversations.auth import create_token, user_for_token
from conversations.models import ApiToken

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def tokens() -> dict[str, str]:
    users = {name: get_user_model().objects.create_user(name) for name in ("alice", "bob")}
    return {
        "alice_laptop": create_token(users["alice"], name="laptop"),
        "alice_script": create_token(users["alice"], name="script"),
        "bob": create_token(users["bob"]),
    }


def revoke(*args: str) -> str:
    out = StringIO()
    call_command("revoketoken", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def usable(tokens: dict[str, str]) -> set[str]:
    return {name for name, raw in tokens.items() if user_for_token(raw) is not None}


def test_revoke_by_prefix_lists_what_was_revoked(tokens):
    prefix = tokens["alice_laptop"][:8]
    text = revoke(prefix)
    assert f"{prefix}… 'laptop' of alice" in text and "1 token(s) revoked." in text
    assert usable(tokens) == {"alice_script", "bob"}
    assert tokens["alice_laptop"] not in text  # never the token itself
    assert "already revoked" in revoke(prefix)  # idempotent, exit 0


def test_revoke_by_id_or_by_the_whole_token(tokens):
    token_id = ApiToken.objects.get(name="script").pk
    revoke(str(token_id))
    revoke(tokens["bob"])
    assert usable(tokens) == {"alice_laptop"}


def test_revoke_every_token_of_a_user(tokens):
    text = revoke("--user", "alice", "--all")
    assert "2 token(s) revoked." in text and "'laptop'" in text and "'script'" in text
    assert usable(tokens) == {"bob"}


def test_an_ambiguous_prefix_is_refused_with_the_candidates(tokens):
    ApiToken.objects.update(prefix="pb_same0")
    with pytest.raises(CommandError, match=r"3 tokens have the prefix 'pb_same0': #\d+ \(alice 'laptop'\)"):
        revoke("pb_same0")
    revoke("pb_same0", "--user", "bob")  # narrowed to one
    assert usable(tokens) == {"alice_laptop", "alice_script"}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((), "name a token"),
        (("--all",), "--user USERNAME --all"),
        (("pb_x", "--user", "alice", "--all"), "--user USERNAME --all"),
        (("pb_nope",), "no matching token"),
        (("--user", "nobody", "--all"), "no user 'nobody'"),
        # Digits int() cannot read or no id column holds: looked up as a prefix, never a traceback.
        (("²",), "no matching token"),
        (("٣",), "no matching token"),
        (("1²",), "no matching token"),
        (("9" * 30,), "no matching token"),
        (("9" * 5000,), "no matching token"),  # past int()'s 4 300-digit limit
        ((str(2**63),), "no matching token"),
    ],
)
def test_bad_input_is_a_command_error_and_revokes_nothing(tokens, args, error):
    with pytest.raises(CommandError, match=error):
        revoke(*args)
    assert usable(tokens) == set(tokens)


def test_an_id_at_the_top_of_the_id_range_is_looked_up(tokens):
    with pytest.raises(CommandError, match="no matching token"):
        revoke(str(2**63 - 1))
    assert usable(tokens) == set(tokens)


def test_user_finds_the_user_the_login_form_would(tokens):
    """``--user ａｌｉｃｅ`` (full-width) is alice, as Django's login form normalises it (NFKC)."""
    text = revoke("--user", "ａｌｉｃｅ", "--all")
    assert "2 token(s) revoked." in text
    assert usable(tokens) == {"bob"}
