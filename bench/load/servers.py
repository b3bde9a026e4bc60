"""Starting and stopping the benchmark's server processes (all on 127.0.0.1).

Every process starts in its own session (process group) and is registered in ``STARTED``;
``stop_all()`` (called from the harness's ``finally`` and at exit) SIGTERMs each group and
SIGKILLs what is left after a few seconds. Output goes to log files in the run's temp directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.load.common import LOOPBACK, REPO, free_port, http_request, loads

PYTHON = sys.executable
STARTED: list[Proc] = []
LOG_PATTERN = re.compile(r"ERROR|CRITICAL|Traceback|WARNING|interrupted|Exception", re.IGNORECASE)


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """Our environment without PICOBOT_* settings and proxy variables (loopback only), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_") and "proxy" not in k.lower()}
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Proc:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pid = self.popen.pid
        STARTED.append(self)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    async def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """Wait until the log shows ``pattern``; raises if the process exits or time runs out."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = regex.search(self.log_text())
            if match:
                return match
            if self.popen.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited ({self.popen.returncode}):\n{self.log_text()[-3000:]}"
                )
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.name}: no {pattern!r} within {timeout} s:\n{self.log_text()[-3000:]}")

    def stop(self, timeout: float = 20) -> int | None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(5)
        else:  # its children (if any) still go
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        self._log.close()
        if self in STARTED:
            STARTED.remove(self)
        return self.popen.returncode

    def notable_lines(self, limit: int = 12) -> tuple[int, list[str]]:
        """(count, first distinct lines) of the log that mention errors, warnings or 'interrupted'."""
        lines = [line for line in self.log_text().splitlines() if LOG_PATTERN.search(line)]
        distinct: list[str] = []
        for line in lines:
            short = re.sub(r"\b[0-9a-f]{8,}\b|\d+", "#", line)[:160]
            if short not in {re.sub(r"\b[0-9a-f]{8,}\b|\d+", "#", d)[:160] for d in distinct}:
                distinct.append(line[:300])
            if len(distinct) >= limit:
                break
        return len(lines), distinct


def stop_all() -> None:
    for proc in list(STARTED):
        with contextlib.suppress(Exception):
            proc.stop(timeout=10)


async def wait_http_ok(port: int, path: str, timeout: float, proc: Proc) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited:\n{proc.log_text()[-3000:]}")
        with contextlib.suppress(OSError, TimeoutError, ValueError, IndexError):
            status, _ = await http_request(port, "GET", path, timeout=2)
            if status == 200:
                return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{proc.name}: {path} not ready within {timeout} s:\n{proc.log_text()[-3000:]}")


# --- the local LLM server -----------------------------------------------------------------------
class LLMServer:
    def __init__(self, chunks: int, rate: float, log_dir: Path) -> None:
        self.proc = Proc(
            "llm_server",
            [PYTHON, "-m", "bench.load.llm_server", "--chunks", str(chunks), "--rate", str(rate)],
            clean_env({}),
            log_dir,
        )
        self.port = 0

    async def start(self) -> None:
        self.port = int((await self.proc.wait_for(r"LISTENING (\d+)", 30)).group(1))

    async def take_times(self) -> dict:
        status, body = await http_request(self.port, "GET", "/bench/times", timeout=30)
        return loads(body)

    @property
    def pids(self) -> list[int]:
        return [self.proc.pid]


# --- PicoBot ------------------------------------------------------------------------------------
def llm_env(llm_port: int) -> dict[str, str]:
    return {
        "PICOBOT_LLM_PROVIDER": "openai",
        "PICOBOT_LLM_BASE_URL": f"http://{LOOPBACK}:{llm_port}/v1",
        "PICOBOT_LLM_MODEL": "bench",
        "PICOBOT_LLM_API_KEY": "bench-key-0000000000",
        "PICOBOT_AUTO_TITLE_AFTER": "0",
        "DJANGO_SETTINGS_MODULE": "picobot_site.settings",
    }


class PicoBot:
    """Base: ``ws_urls`` (clients are spread over them), ``http_ports``, ``pids`` (measured),
    ``tokens`` (one user each), ``procs``."""

    mode = ""

    def __init__(
        self, llm_port: int, users: int, log_root: Path, *, extra_env: dict[str, str] | None = None
    ) -> None:
        self.llm_port = llm_port
        self.users = users
        self.dir = Path(tempfile.mkdtemp(prefix=f"bench-{self.mode}-", dir=log_root))
        self.env: dict[str, str] = clean_env(
            {**llm_env(llm_port), "PICOBOT_DATA_DIR": str(self.dir), **(extra_env or {})}
        )
        self.procs: list[Proc] = []
        self.ws_urls: list[str] = []
        self.http_ports: list[int] = []
        self.tokens: list[str] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _run(self, *argv: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [PYTHON, *argv],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
            )
        return done.stdout

    def prepare(self) -> None:
        """Migrate and create the users (one token each)."""
        self._run("manage.py", "migrate", "--verbosity", "0")
        out = self._run("-m", "bench.load.mkusers", "--count", str(self.users), "--prefix", "bench")
        self.tokens = loads(out.strip().splitlines()[-1])

    def logs(self) -> dict[str, tuple[int, list[str]]]:
        return {p.name: p.notable_lines() for p in self.procs}

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()

    def cleanup(self, keep: bool) -> None:
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    async def redis_clients(self) -> int | None:
        return None

    def hold_storage_lock(self, seconds: float) -> None:
        """Hold the database's write lock for ``seconds`` (blocking; run it in a thread): another
        writer (a backup, a migration, an admin's long transaction) keeps the storage busy."""
        import sqlite3

        with contextlib.closing(sqlite3.connect(self.dir / "picobot.sqlite3", timeout=60)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            time.sleep(seconds)
            conn.rollback()


class EmbeddedPicoBot(PicoBot):
    """One ``manage.py serve --port 0`` (SQLite in a fresh data dir, in-memory layer)."""

    mode = "embedded"

    async def start(self) -> None:
        await asyncio.to_thread(self.prepare)
        proc = Proc(
            "serve",
            [PYTHON, "manage.py", "serve", "--host", LOOPBACK, "--port", "0", "--no-migrate"],
            self.env,
            self.dir,
        )
        self.procs.append(proc)
        url = (await proc.wait_for(r"PicoBot is running at (http://\S+)", 120)).group(1)
        url = url.replace("localhost", LOOPBACK)
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        self.http_ports = [port]
        self.ws_urls = [f"ws://{LOOPBACK}:{port}/ws/chat/"]


class ScaleoutPicoBot(PicoBot):
    """2 × ``serve --no-worker`` (Daphne) + 2 × runagent on a fresh PostgreSQL database and one Redis db (flushed)."""

    mode = "scaleout"

    def __init__(
        self,
        llm_port: int,
        users: int,
        log_root: Path,
        *,
        pg_admin_url: str,
        redis_base: str,
        redis_db: int,
        daphnes: int = 2,
        agents: int = 2,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(llm_port, users, log_root, extra_env=extra_env)
        self.pg_admin_url = pg_admin_url
        self.db_name = f"picobot_bench_{os.getpid()}_{int(time.time() * 1000) % 10**8}"
        self.redis_url = f"{redis_base.rstrip('/')}/{redis_db}"
        self.daphnes = daphnes
        self.agents = agents
        base = pg_admin_url.rsplit("/", 1)[0]
        self.env.update(
            {"PICOBOT_DATABASE_URL": f"{base}/{self.db_name}", "PICOBOT_REDIS_URL": self.redis_url}
        )
        self._db_created = False

    def hold_storage_lock(self, seconds: float) -> None:
        """Hold an exclusive lock on the dialog and inbox tables for ``seconds`` (blocking): every
        lease renewal, turn start and commit waits for it."""
        import psycopg

        with psycopg.connect(self.env["PICOBOT_DATABASE_URL"]) as conn:
            conn.execute("LOCK TABLE conversations_dialog, conversations_inboxmessage IN EXCLUSIVE MODE")
            time.sleep(seconds)
            conn.rollback()

    def _pg(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.pg_admin_url, autocommit=True) as conn:
            conn.execute(sql)

    def _flush_redis(self) -> None:
        import redis

        client = redis.Redis.from_url(self.redis_url)
        try:
            client.flushdb()
        finally:
            client.close()

    async def start(self) -> None:
        await asyncio.to_thread(self._flush_redis)
        await asyncio.to_thread(self._pg, f'CREATE DATABASE "{self.db_name}"')
        self._db_created = True
        await asyncio.to_thread(self.prepare)
        for i in range(self.daphnes):
            port = free_port()
            # The README's scale-out web process: Daphne with PicoBot's guards, no agent worker.
            proc = Proc(
                f"daphne{i}",
                [
                    PYTHON,
                    "manage.py",
                    "serve",
                    "--no-worker",
                    "--no-migrate",
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(port),
                ],
                self.env,
                self.dir,
            )
            self.procs.append(proc)
            self.http_ports.append(port)
            self.ws_urls.append(f"ws://{LOOPBACK}:{port}/ws/chat/")
        for i in range(self.agents):
            proc = Proc(
                f"runagent{i}",
                [PYTHON, "manage.py", "runagent", "--worker-id", f"bench-agent-{i}"],
                self.env,
                self.dir,
            )
            self.procs.append(proc)
        for proc, port in zip(self.procs[: self.daphnes], self.http_ports, strict=True):
            await wait_http_ok(port, "/api/health", 60, proc)
        for proc in self.procs[self.daphnes :]:
            await proc.wait_for(r"agent worker .* running", 60)

    async def redis_clients(self) -> int | None:
        import redis

        def count() -> int:
            client = redis.Redis.from_url(self.redis_url)
            try:
                return len(client.client_list())
            finally:
                client.close()

        return await asyncio.to_thread(count)

    def cleanup(self, keep: bool) -> None:
        with contextlib.suppress(Exception):
            self._flush_redis()
        if self._db_created:
            with contextlib.suppress(Exception):
                self._pg(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        super().cleanup(keep)


# --- the Channels floor -------------------------------------------------------------------------
class ChannelsFloor:
    mode = "channels-floor"

    def __init__(self, chunks: int, rate: float, log_dir: Path) -> None:
        self.port = free_port()
        env = clean_env(
            {
                "BENCH_FLOOR_CHUNKS": str(chunks),
                "BENCH_FLOOR_RATE": str(rate),
                "DJANGO_SETTINGS_MODULE": "bench.load.floor_settings",
            }
        )
        self.proc = Proc(
            "channels_floor",
            [
                PYTHON,
                "-m",
                "daphne",
                "-b",
                LOOPBACK,
                "-p",
                str(self.port),
                "bench.load.floor_app:application",
            ],
            env,
            log_dir,
        )
        self.procs = [self.proc]
        self.ws_urls = [f"ws://{LOOPBACK}:{self.port}/ws/chat/"]

    @property
    def pids(self) -> list[int]:
        return [self.proc.pid]

    async def start(self) -> None:
        await wait_http_ok(self.port, "/health", 60, self.proc)

    async def take_times(self) -> dict:
        status, body = await http_request(self.port, "GET", "/times", timeout=30)
        return loads(body)

    def logs(self) -> dict[str, tuple[int, list[str]]]:
        return {self.proc.name: self.proc.notable_lines()}

    def stop(self) -> None:
        self.proc.stop()
