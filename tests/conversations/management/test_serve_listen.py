"""``manage.py serve`` that cannot listen exits 1 with one line, and bad ``--host``/``--port`` are
usage errors (exit 2) — QA: Daphne logged "Listen failure" and ``serve`` exited 0."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.serve_process import REPO, server_env

pytestmark = [pytest.mark.e2e]


def serve(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """Run ``manage.py serve --no-migrate ARGS`` to its end (these runs never start serving)."""
    return subprocess.run(
        [sys.executable, "manage.py", "serve", "--no-migrate", *args],
        cwd=REPO,
        env=server_env(data_dir),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated data directory without users (migrated once: each serve run then takes ~1 s)."""
    path = tmp_path_factory.mktemp("serve-listen")
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=REPO,
        env=server_env(path),
        check=True,
        timeout=120,
    )
    return path


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on for the test's duration."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield holder.getsockname()[1]


def users(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / "picobot.sqlite3") as db:
        return db.execute("SELECT count(*) FROM auth_user").fetchone()[0]


def test_a_port_in_use_exits_1_with_one_line_and_creates_no_first_user(data_dir, taken_port):
    done = serve(data_dir, "--port", str(taken_port))
    assert done.returncode == 1
    assert done.stderr == (
        f"CommandError: cannot listen on 127.0.0.1:{taken_port}: address already in use "
        "(another program listens there: stop it or choose another --port)\n"
    )
    assert "PicoBot is running" not in done.stdout and "Listen failure" not in done.stderr
    assert users(data_dir) == 0, "no first-start token is made for a server that never announces it"


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("203.0.113.9", "cannot assign requested address (no interface of this machine has that address"),
        ("no-such-host.invalid", "name or service not known"),
    ],
)
def test_an_address_it_cannot_bind_exits_1_with_the_reason(data_dir, host, reason):
    done = serve(data_dir, "--host", host, "--port", "8799")
    assert done.returncode == 1
    assert done.stderr.startswith(f"CommandError: cannot listen on {host}:8799: ")
    assert reason in done.stderr.lower() and done.stderr.count("\n") == 1
    assert users(data_dir) == 0


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--port", "99999"],
            "argument --port: must be a whole number from 0 to 65535 (0 picks a free one), got '99999'",
        ),
        (["--port", "-1"], "argument --port: must be a whole number from 0 to 65535"),
        (
            ["--port", "٣"],
            "argument --port: must be a whole number from 0 to 65535 (0 picks a free one), got '٣'",
        ),
        (["--port", "8e3"], "argument --port: must be a whole number"),
        (["--host", ""], "argument --host: must be an IP address or a host name"),  # Twisted: every interface
        (["--host", "a=b"], "argument --host: must be an IP address or a host name"),
        (["--host", "127.0.0.1 "], "argument --host: must be an IP address or a host name"),
        (["--host", "[example.com]"], "argument --host: must be an IP address or a host name"),
    ],
)
def test_bad_host_or_port_is_a_usage_error(tmp_path, args, error):
    done = serve(tmp_path, *args)  # refused by argparse, before the database is opened
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert "usage:" in done.stderr and last.startswith("manage.py serve: error: ") and error in last


def test_valid_hosts_and_ports_parse():
    from conversations.management.commands.serve import Command

    parser = Command().create_parser("manage.py", "serve")
    for host in ("127.0.0.1", "::1", "[::1]", "0.0.0.0", "localhost", "pico-bot.example.org"):
        assert parser.parse_args(["--host", host]).host == host
    for port in ("0", "1", "8000", "65535"):
        assert parser.parse_args(["--port", port]).port == int(port)


def test_no_worker_without_a_shared_channel_layer_is_refused_with_the_reason(data_dir):
    done = serve(data_dir, "--no-worker", "--port", "0")
    assert done.returncode == 1
    assert done.stderr.startswith("CommandError: --no-worker needs PICOBOT_REDIS_URL")
    assert "PicoBot is running" not in done.stdout
