"""Operator commands refuse bad input with one line and exit 1, and usage errors exit 2
(issue 7 review: createtoken took any username; every command crashed on an unmigrated database)."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, ProgrammingError

from conversations.management.commands._common import NOT_SET_UP, database_error, is_missing_table
from conversations.models import ApiToken
from tests.e2e.serve_process import server_env

pytestmark = [pytest.mark.django_db]


@pytest.mark.parametrize(("username", "error"), [
    ("", "cannot be blank"),
    ("   ", "leading or trailing spaces"),
    (" alice", "leading or trailing spaces"),
    ("alice ", "leading or trailing spaces"),
    ("a b", "Enter a valid username"),
    ("<script>", "Enter a valid username"),
    ("x" * 151, "at most 150 characters"),
])
def test_createtoken_refuses_usernames_django_would_not_accept(username, error):
    with pytest.raises(CommandError, match=error):
        call_command("createtoken", username, stdout=StringIO(), stderr=StringIO())
    assert not get_user_model().objects.exists() and not ApiToken.objects.exists()


def test_createtoken_accepts_a_valid_username_and_bounds_the_token_name():
    out = StringIO()
    call_command("createtoken", "ok.user@example-1+x_y", stdout=out, stderr=StringIO())
    assert out.getvalue().strip().startswith("pb_")
    with pytest.raises(CommandError, match="at most 100 characters"):
        call_command("createtoken", "ok.user@example-1+x_y", "--name", "n" * 101, stdout=StringIO(), stderr=StringIO())
    assert ApiToken.objects.count() == 1


def test_purge_user_is_not_combined_with_the_day_options():
    get_user_model().objects.create_user("alice")
    with pytest.raises(CommandError, match="leave out --retention-days"):
        call_command("purge", "--user", "alice", "--inactive-days", "3", stdout=StringIO())
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("purge", "--user", "nobody", stdout=StringIO())


@pytest.mark.parametrize(("exc", "message"), [
    (OperationalError("no such table: conversations_dialog"), NOT_SET_UP),
    (ProgrammingError('relation "conversations_dialog" does not exist'), NOT_SET_UP),
    (OperationalError('FATAL:  database "picobot" does not exist'), "the database failed"),
    (OperationalError("connection refused"), "PICOBOT_DATABASE_URL"),
])
def test_database_errors_become_one_line(exc, message):
    assert message in str(database_error(exc))
    assert is_missing_table(exc) is (message == NOT_SET_UP)


def run_manage(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=settings.BASE_DIR, env=server_env(data_dir),
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("args", [
    ["createtoken", "bob"], ["revoketoken", "--user", "bob", "--all"], ["purge"], ["export", "--user", "bob"],
    ["runagent"], ["serve", "--no-migrate", "--port", "0"],
])
def test_an_unmigrated_database_is_one_line_and_exit_1_for_every_command(tmp_path, args):
    done = run_manage(tmp_path, *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == f"CommandError: {NOT_SET_UP}"
    assert "Traceback" not in done.stderr


def test_import_on_an_unmigrated_database_too(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text('{"format": "picobot-export", "version": 1, "dialogs": [{"channel": "feishu", '
                    '"chat_id": "oc_1", "dialog_id": "a1", "messages": []}]}')
    done = run_manage(tmp_path / "data", "import", str(path))
    assert (done.returncode, done.stderr.strip()) == (1, f"CommandError: {NOT_SET_UP}")


def test_usage_errors_exit_2_and_bad_input_exits_1(tmp_path):
    """argparse's convention, as the README says: 2 for a usage error (with the usage line)."""
    usage = run_manage(tmp_path, "purge", "--no-such-option")
    assert usage.returncode == 2 and "usage:" in usage.stderr
    bad = run_manage(tmp_path, "createtoken", "a b")
    assert bad.returncode == 1 and bad.stderr.startswith("CommandError: invalid username")
