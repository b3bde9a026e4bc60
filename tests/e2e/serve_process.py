"""Start the real ``manage.py serve`` process on a free loopback port (end-to-end tests).

``ServeProcess(data_dir, env)`` runs ``serve --port 0`` with its own data directory (SQLite file,
secret key), reads the announced URL from stdout, and stops it with SIGTERM like an operator
would (or ``kill()``s it with SIGKILL, like a crash). ``manage(...)`` runs any other management
command against the same data directory.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from providers.testing import LocalSSEServer

REPO = Path(__file__).resolve().parents[2]
URL_LINE = re.compile(r"PicoBot is running at (http://\S+)")


def server_env(data_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a server process: our data dir, no inherited PICOBOT_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    env.update({"PICOBOT_DATA_DIR": str(data_dir), "DJANGO_SETTINGS_MODULE": "picobot_site.settings"})
    env.update(extra or {})
    return env


def openai_env(llm: LocalSSEServer) -> dict[str, str]:
    """Settings that point a server at the mock OpenAI-compatible ``llm`` (no retries)."""
    return {
        "PICOBOT_LLM_PROVIDER": "openai",
        "PICOBOT_LLM_BASE_URL": llm.base_url,
        "PICOBOT_LLM_API_KEY": "test-key",
        "PICOBOT_LLM_MODEL": "test-model",
        "PICOBOT_LLM_MAX_RETRIES": "0",
    }


def manage(data_dir: Path, *args: str, extra_env: dict[str, str] | None = None) -> str:
    """Run ``manage.py ARGS`` synchronously; returns stdout; raises CalledProcessError."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=server_env(data_dir, extra_env),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


class ServeProcess:
    """``async with ServeProcess(data_dir, env) as server:`` → ``server.url``, ``server.ws_url``."""

    def __init__(self, data_dir: Path, extra_env: dict[str, str] | None = None, port: int = 0) -> None:
        self.data_dir = data_dir
        # 0: any free port. The port found is kept, so a restart comes back where clients reconnect.
        self.port = port
        self.extra_env = extra_env or {}
        self.proc: asyncio.subprocess.Process | None = None
        self.url = ""
        self.output: list[str] = []

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "ws/chat/"

    async def start(self, timeout: float = 60) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "manage.py",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            cwd=REPO,
            env=server_env(self.data_dir, self.extra_env),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        async with asyncio.timeout(timeout):
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    raise RuntimeError("serve exited before announcing its URL:\n" + "".join(self.output))
                text = line.decode(errors="replace")
                self.output.append(text)
                match = URL_LINE.search(text)
                if match:
                    self.url = match.group(1).replace("localhost", "127.0.0.1")
                    self.port = urlsplit(self.url).port or self.port
                    break
        self._drain = asyncio.ensure_future(self._drain_output())

    async def _drain_output(self) -> None:
        assert self.proc and self.proc.stdout
        while line := await self.proc.stdout.readline():
            self.output.append(line.decode(errors="replace"))

    async def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait; returns the exit code (kills after ``timeout`` s)."""
        if self.proc is None or self.proc.returncode is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(timeout):
                code = await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            code = await self.proc.wait()
        await self._drain
        return code

    async def kill(self, timeout: float = 30) -> int:
        """SIGKILL and wait — a crash: no shutdown handler runs, running turns die mid-flight.
        Returns the exit code (``-SIGKILL``)."""
        if self.proc is None or self.proc.returncode is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.kill()
        async with asyncio.timeout(timeout):
            code = await self.proc.wait()
            await self._drain
        return code

    async def __aenter__(self) -> ServeProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
