"""The storage and session tests again, on PostgreSQL (DESIGN §2 scale-out, §10).

SQLite runs one writer at a time and forgives what PostgreSQL refuses (text lengths, NUL bytes,
row locks), so the dialog lifecycle, inbox, lease and turn-boundary tests run a second time in a
child pytest whose ``PICOBOT_DATABASE_URL`` names the server of ``PICOBOT_TEST_DATABASE_URL``
(pytest-django creates and drops its own ``test_…`` database there).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import pytest

from tests.e2e.serve_process import REPO
from tests.services.conftest import require_service

pytestmark = [pytest.mark.services]

STORAGE_TESTS = [
    "tests/conversations/storage/test_storage.py",
    "tests/conversations/storage/test_dialog_lifecycle.py",
    "tests/conversations/runtime/test_sessions.py",
    "tests/conversations/titles/test_titles.py",
    "tests/conversations/context/test_compaction.py",
    "tests/conversations/runtime/test_restart_notices.py",
    "tests/conversations/chat/test_commands.py",
    "tests/conversations/tools/test_builtin_tools.py",  # memory_search takes PostgreSQL's full-text path
    "tests/conversations/tools/test_memory_turns.py",
    "tests/conversations/context/test_auto_compaction.py",
    "tests/conversations/runtime/test_cancel_failure_tables.py",
    "tests/conversations/management/test_purge.py",
    "tests/conversations/transfer/test_export_import.py",
    "tests/conversations/api/test_endpoints.py",
    "tests/conversations/api/test_stop_and_compact_once.py",  # stop marks and compaction claims live in rows
    "tests/picobot_site/test_nul_urls.py",  # PostgreSQL cannot hold NUL: the admin answered 500
    "tests/conversations/admin/test_admin_json_input.py",
    "tests/conversations/admin/test_admin_lookups.py",
    "tests/conversations/transfer/test_import_exact.py",
    "tests/conversations/storage/test_message_media.py",  # the image types come from a JSON expression per vendor
    "tests/conversations/api/test_message_media.py",
    "tests/conversations/storage/test_turn_checkpoints.py",  # one executemany UPDATE with a JSON parameter
    "tests/conversations/runtime/test_checkpoint_recovery.py",
    "tests/conversations/chat/test_sessions_paging.py",  # the preview and the search are one query per vendor
    "tests/conversations/feishu/test_receive.py",  # concurrent redeliveries meet the unique constraint
    "tests/conversations/feishu/test_end_to_end.py",  # card state, recovery claims, giving up
    "tests/conversations/schedules/test_schedule_limit_race.py",  # racing creates meet the row lock
    "tests/conversations/storage/test_task_delete_race.py",  # a task's end and its dialog's delete: lock order
]


def test_storage_semantics_hold_on_postgresql(tmp_path: Path) -> None:
    base = require_service("PICOBOT_TEST_DATABASE_URL")
    name = f"picobot_pg_{secrets.token_hex(4)}"  # pytest-django uses test_<name> and drops it
    url = urlunparse(urlparse(base)._replace(path=f"/{name}"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    env.update({"PICOBOT_DATABASE_URL": url, "PICOBOT_DATA_DIR": str(tmp_path)})
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--create-db", *STORAGE_TESTS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    # 0 = every collected test passed (pytest answers 5 when it collected none).
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "Error when trying to teardown test databases" not in done.stdout, "connections left open"
