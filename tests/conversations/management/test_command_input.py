"""Operator commands refuse bad input with one line and exit 1, and usage errors exit 2
(createtoken takes only usernames Django accepts; an unmigrated database is one line, no crash)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, ProgrammingError

from conversations.management.commands._common import NOT_SET_UP, database_error, is_missing_table
from conversations.models import ApiToken, Dialog
from tests.conversations.dialogs import make_dialog
from tests.e2e.serve_process import server_env

pytestmark = [pytest.mark.django_db]


@pytest.mark.parametrize(
    ("username", "error"),
    [
        ("", "cannot be blank"),
        ("   ", "leading or trailing spaces"),
        (" alice", "leading or trailing spaces"),
        ("alice ", "leading or trailing spaces"),
        ("a b", "Enter a valid username"),
        ("<script>", "Enter a valid username"),
        ("x" * 151, "at most 150 characters"),
    ],
)
def test_createtoken_refuses_usernames_django_would_not_accept(username, error):
    with pytest.raises(CommandError, match=error):
        call_command("createtoken", username, stdout=StringIO(), stderr=StringIO())
    assert not get_user_model().objects.exists() and not ApiToken.objects.exists()


@pytest.mark.parametrize(
    ("given", "stored"), [("ｆｕｌｌ", "full"), ("ﬁle", "file"), ("x²", "x2"), ("A\u030a", "\u00c5")]
)
def test_createtoken_normalises_the_username_as_the_login_form_does(rf, given, stored):
    """Django's login form (and createsuperuser) NFKC-normalise usernames: a user stored under
    ``ｆｕｌｌ`` could never log in to the WebUI."""
    out, err = StringIO(), StringIO()
    call_command("createtoken", given, stdout=out, stderr=err)
    token = out.getvalue().strip().splitlines()[-1]
    assert list(get_user_model().objects.values_list("username", flat=True)) == [stored]
    assert (
        f"Username normalised to {stored!r}" in err.getvalue()
        and f"Created user {stored!r}." in err.getvalue()
    )
    form = AuthenticationForm(rf.post("/login/"), data={"username": given, "password": token})
    assert form.is_valid(), form.errors
    assert form.get_user().get_username() == stored
    # The same user again, by either spelling.
    call_command("createtoken", stored, stdout=StringIO(), stderr=(again := StringIO()))
    assert "normalised" not in again.getvalue() and "Created" not in again.getvalue()
    assert get_user_model().objects.count() == 1 and ApiToken.objects.count() == 2


@pytest.mark.parametrize(
    ("username", "error"),
    [
        ("¨a", "Enter a valid username"),  # NFKC: " \u0308a", a space
        ("㍻" * 76, "at most 150 characters"),  # 76 characters, 152 once normalised
    ],
)
def test_createtoken_checks_the_normalised_username(username, error):
    with pytest.raises(CommandError, match=error):
        call_command("createtoken", username, stdout=StringIO(), stderr=StringIO())
    assert not get_user_model().objects.exists()


def test_createtoken_accepts_a_valid_username_and_bounds_the_token_name():
    out = StringIO()
    call_command("createtoken", "ok.user@example-1+x_y", stdout=out, stderr=StringIO())
    assert out.getvalue().strip().startswith("pb_")
    with pytest.raises(CommandError, match="at most 100 characters"):
        call_command(
            "createtoken", "ok.user@example-1+x_y", "--name", "n" * 101, stdout=StringIO(), stderr=StringIO()
        )
    assert ApiToken.objects.count() == 1


def test_purge_user_is_not_combined_with_the_day_options():
    get_user_model().objects.create_user("alice")
    with pytest.raises(CommandError, match="leave out --retention-days"):
        call_command("purge", "--user", "alice", "--inactive-days", "3", stdout=StringIO())
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("purge", "--user", "nobody", stdout=StringIO())


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (OperationalError("no such table: conversations_dialog"), NOT_SET_UP),
        (ProgrammingError('relation "conversations_dialog" does not exist'), NOT_SET_UP),
        (OperationalError('FATAL:  database "picobot" does not exist'), "the database failed"),
        (OperationalError("connection refused"), "PICOBOT_DATABASE_URL"),
    ],
)
def test_database_errors_become_one_line(exc, message):
    assert message in str(database_error(exc))
    assert is_missing_table(exc) is (message == NOT_SET_UP)


def run_manage(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env=server_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["createtoken", "bob"],
        ["revoketoken", "--user", "bob", "--all"],
        ["purge"],
        ["export", "--user", "bob"],
        ["runagent"],
        ["serve", "--no-migrate", "--port", "0"],
    ],
)
def test_an_unmigrated_database_is_one_line_and_exit_1_for_every_command(tmp_path, args):
    done = run_manage(tmp_path, *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == f"CommandError: {NOT_SET_UP}"
    assert "Traceback" not in done.stderr


def test_import_on_an_unmigrated_database_too(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(
        '{"format": "picobot-export", "version": 1, "dialogs": [{"channel": "feishu", '
        '"chat_id": "oc_1", "dialog_id": "a1", "messages": []}]}'
    )
    done = run_manage(tmp_path / "data", "import", str(path))
    assert (done.returncode, done.stderr.strip()) == (1, f"CommandError: {NOT_SET_UP}")


def test_usage_errors_exit_2_and_bad_input_exits_1(tmp_path):
    """argparse's convention, as the README says: 2 for a usage error (with the usage line)."""
    usage = run_manage(tmp_path, "purge", "--no-such-option")
    assert usage.returncode == 2 and "usage:" in usage.stderr
    bad = run_manage(tmp_path, "createtoken", "a b")
    assert bad.returncode == 1 and bad.stderr.startswith("CommandError: invalid username")


def test_every_user_option_finds_the_user_the_login_form_would(tmp_path):
    """``--user ａｌｉｃｅ`` (full-width) names alice in export, import, purge and revoketoken."""
    alice = get_user_model().objects.create_user("alice")
    dialog = make_dialog(alice)
    out = StringIO()
    call_command("export", "--user", "ａｌｉｃｅ", stdout=out, stderr=StringIO())
    assert [d["id"] for d in json.loads(out.getvalue())["dialogs"]] == [dialog.pk]
    path = tmp_path / "e.json"
    path.write_text(out.getvalue())
    done = StringIO()
    call_command("import", str(path), "--user", "ａｌｉｃｅ", "--as-new", stdout=done, stderr=StringIO())
    assert Dialog.objects.get(pk=done.getvalue().split()[0]).owner == alice
    listing = StringIO()
    call_command("purge", "--user", "ａｌｉｃｅ", stdout=listing, stderr=StringIO())
    assert "owned by alice" in listing.getvalue() and "Would purge 2 dialog(s)" in listing.getvalue()


def test_migrate_with_an_unreachable_database_is_one_line_naming_the_setting(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    env.update(PICOBOT_DATA_DIR=str(tmp_path), PICOBOT_DATABASE_URL="postgres://u:secretpw@127.0.0.1:1/db")
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate"],
        cwd=Path(__file__).resolve().parents[3],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("CommandError: the database failed:"), done.stderr
    assert "PICOBOT_DATABASE_URL" in lines[0] and "secretpw" not in done.stderr


def test_a_command_error_quoting_several_lines_is_printed_as_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    plugin = tmp_path / "plugin_two_lines.py"
    plugin.write_text('raise RuntimeError("first line\\nsecond line")\n')
    env.update(PICOBOT_DATA_DIR=str(tmp_path), PYTHONPATH=str(tmp_path))
    repo = Path(__file__).resolve().parents[3]
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=repo, env=env, check=True, timeout=120
    )
    env["PICOBOT_TOOL_MODULES"] = "plugin_two_lines"
    done = subprocess.run(
        [sys.executable, "manage.py", "runagent"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "first line\\nsecond line" in lines[0], done.stderr
