"""Scheduled prompts with two real ``runagent`` processes on PostgreSQL + Redis (issue 18, Must
show 3): every due slot enters its dialog's inbox exactly once however the two schedulers race;
after both processes were down across due times, the most recent missed slot runs once (or, with
``PICOBOT_SCHEDULE_MISSED=skip``, none does), and its notice waits on its run row for the chat's
next connection (nobody was connected; ``test_schedule_notices`` shows the connect)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from providers.testing import LocalSSEServer
from tests.conversations.streams import answer_pieces
from tests.e2e.serve_process import manage, openai_env, server_env
from tests.services.conftest import require_service
from tests.services.test_scale_out import postgres_url, spawn, stop  # noqa: F401 - fixture used here

pytestmark = [pytest.mark.services, pytest.mark.e2e]

DIALOGS = 12
HOUR = 3_600_000

SETUP = f"""
from conversations import storage
from conversations.auth import get_or_create_user
user, _ = get_or_create_user("carol")
ids = []
for n in range({DIALOGS}):
    dialog = storage.create_dialog(user, "cli_chat", str(user.pk), f"d{{n}}")
    ids.append(str(storage.create_schedule(dialog, "@every 1h", f"scheduled prompt {{n}}")["id"]))
print(",".join(ids))
"""


def query(url: str, sql: str, *args: object) -> list[tuple]:
    """The rows of ``sql`` (none for a statement without a result)."""
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql, args)
        return cursor.fetchall() if cursor.description else []


async def until(url: str, sql: str, expected: object, timeout: float = 60) -> None:
    """Poll ``sql``'s first value until it equals ``expected``."""
    async with asyncio.timeout(timeout):
        while (value := query(url, sql)[0][0]) != expected:  # noqa: ASYNC110 - another process's rows
            await asyncio.sleep(0.2)
    assert value == expected


async def agents(env: dict[str, str]) -> list[asyncio.subprocess.Process]:
    return [await spawn(env, "manage.py", "runagent", "--worker-id", f"sched-{n}") for n in (1, 2)]


async def test_two_runagent_processes_run_each_due_slot_once_and_a_missed_one_once(
    tmp_path: Path, request: pytest.FixtureRequest
):
    database = request.getfixturevalue("postgres_url")
    redis_url = require_service("PICOBOT_TEST_REDIS_URL")
    sse = {"content-type": "text/event-stream"}
    async with LocalSSEServer([(200, sse, answer_pieces(), 0.0)], repeat_last=True) as llm:
        extra = {
            "PICOBOT_DATABASE_URL": database,
            "PICOBOT_REDIS_URL": redis_url,
            **openai_env(llm),
            "PICOBOT_SCHEDULE_POLL_SECONDS": "0.05",
        }
        manage(tmp_path, "migrate", "--noinput", extra_env=extra)
        ids = manage(tmp_path, "shell", "-c", SETUP, extra_env=extra).strip().splitlines()[-1].split(",")
        assert len(ids) == DIALOGS
        env = server_env(tmp_path, extra)

        running = await agents(env)
        try:
            # Every schedule is due 1.5 s from now: both schedulers, polling every 50 ms, race for it.
            query(
                database,
                "UPDATE conversations_schedule SET next_run_at = "
                "(extract(epoch from now()) * 1000)::bigint + 1500, anchor_at = "
                "(extract(epoch from now()) * 1000)::bigint + 1500",
            )
            done = "SELECT count(*) FROM conversations_inboxmessage WHERE status = 'done'"
            await until(database, done, DIALOGS)
            await asyncio.sleep(1.0)  # twenty more polls of each process: nothing new
            runs = query(
                database, "SELECT schedule_id, slot_at, status, missed FROM conversations_schedulerun"
            )
            assert sorted(str(r[0]) for r in runs) == sorted(ids)
            assert {(r[2], r[3]) for r in runs} == {("queued", False)}
            inbox = query(
                database, "SELECT count(*), count(DISTINCT dialog_id) FROM conversations_inboxmessage"
            )
            assert inbox == [(DIALOGS, DIALOGS)]
            users = query(
                database,
                "SELECT source->>'kind', source->>'ref' FROM conversations_message WHERE role = 'user'",
            )
            assert sorted(ref for _, ref in users) == sorted(ids) and {k for k, _ in users} == {"schedule"}
            answers = query(database, "SELECT count(*) FROM conversations_message WHERE role = 'assistant'")
            assert answers == [(DIALOGS,)]
        finally:
            for proc in running:
                await stop(proc)

        # Down across due times: the first schedule's slots 2.5 h, 1.5 h and 0.5 h ago were missed.
        first = ids[0]
        due_hours_ago(database, first, 2.5)
        running = await agents(env)
        try:
            await until(database, done, DIALOGS + 1)
            await asyncio.sleep(1.0)
            runs = query(
                database,
                "SELECT status, missed FROM conversations_schedulerun WHERE schedule_id = %s ORDER BY slot_at",
                int(first),
            )
            # by slot: the two older missed ones skipped, the latest missed one run, then the first run
            assert runs == [("skipped", True), ("skipped", True), ("queued", True), ("queued", False)]
            assert query(database, "SELECT count(*) FROM conversations_inboxmessage") == [(DIALOGS + 1,)]
            (next_run_at,) = query(
                database, "SELECT next_run_at FROM conversations_schedule WHERE id = %s", int(first)
            )[0]
            (now,) = query(database, "SELECT (extract(epoch from now()) * 1000)::bigint")[0]
            assert now < next_run_at <= now + HOUR
            assert pending_notices(database, first) == [("info", True)]
        finally:
            for proc in running:
                await stop(proc)

        # Down again across the second schedule's due times, now with the skip policy.
        second = ids[1]
        due_hours_ago(database, second, 2.5)
        running = await agents({**env, "PICOBOT_SCHEDULE_MISSED": "skip"})
        try:
            missed = (
                f"SELECT count(*) FROM conversations_schedulerun WHERE schedule_id = {int(second)} AND missed"
            )
            await until(database, missed, 3)
            await asyncio.sleep(1.0)
            assert query(database, missed.replace("AND missed", "AND status = 'skipped'")) == [(3,)]
            assert query(database, "SELECT count(*) FROM conversations_inboxmessage") == [(DIALOGS + 1,)]
            assert pending_notices(database, second) == [("info", True)]
        finally:
            for proc in running:
                await stop(proc)


def due_hours_ago(url: str, schedule_id: str, hours: float) -> None:
    """Make the schedule due ``hours`` ago (counted from then): as if the server was down since."""
    query(
        url,
        "UPDATE conversations_schedule SET next_run_at = (extract(epoch from now()) * 1000)::bigint - %s, "
        "anchor_at = (extract(epoch from now()) * 1000)::bigint - %s WHERE id = %s",
        int(hours * HOUR),
        int(hours * HOUR),
        int(schedule_id),
    )


def pending_notices(url: str, schedule_id: str) -> list[tuple[str, bool]]:
    """``(level, says it was missed)`` of the schedule's run notices no client received yet."""
    rows = query(
        url,
        "SELECT notice_level, notice FROM conversations_schedulerun WHERE schedule_id = %s "
        "AND notice_level <> '' AND notice_sent_at IS NULL",
        int(schedule_id),
    )
    return [(level, "while the server was down" in notice) for level, notice in rows]
