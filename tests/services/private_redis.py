"""A private ``redis-server`` a test may stop and restart (never the shared one; DESIGN §10).

``async with PrivateRedis() as redis:`` starts ``redis-server`` without persistence on a free port
of :data:`PORTS` (a restart forgets everything, as a restarted cache would); ``redis.url`` names
it, ``await redis.stop()`` / ``await redis.start()`` take it away and bring it back on the same
port, and leaving the block stops it. Without the ``redis-server`` binary the test is skipped
(failed under ``PICOBOT_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from tests.ports import free_port_in

PORTS = range(6390, 6400)
"""Ports for private servers, away from the shared Redis (6379)."""


class PrivateRedis:
    """One private ``redis-server`` process (see module)."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            message = "redis-server is not installed; this test starts and restarts its own"
            if os.environ.get("PICOBOT_REQUIRE_SERVICES") == "1":
                pytest.fail(message + " (PICOBOT_REQUIRE_SERVICES=1)")
            pytest.skip(message)
        self.binary = binary
        self.port = free_port_in(PORTS)
        self.proc: asyncio.subprocess.Process | None = None
        self.restarts = 0
        self.started = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        """Start it (again, on the same port) and wait until it answers ``PING``. A first start
        whose port was taken meanwhile (another test run) moves to the next free one."""
        assert self.proc is None, "already running"
        for _ in PORTS:
            if await self._start_on_port():
                self.started = True
                return
            if self.started:
                break
            self.port = free_port_in(PORTS)
        raise RuntimeError(f"redis-server could not start on port {self.port}")

    async def _start_on_port(self) -> bool:
        options = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = await asyncio.create_subprocess_exec(
            self.binary, *options, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        async with asyncio.timeout(30):
            while True:
                if await self._answers():
                    return True
                if self.proc.returncode is not None:
                    self.proc = None
                    return False
                await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """Stop it (SIGTERM, as an operator's restart does) and wait until it has exited."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        proc.terminate()
        try:
            async with asyncio.timeout(30):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()

    async def restart(self, down_seconds: float = 0.0) -> None:
        """Stop it, stay down for ``down_seconds``, start it again (empty: no persistence)."""
        await self.stop()
        await asyncio.sleep(down_seconds)
        await self.start()
        self.restarts += 1

    async def _answers(self) -> bool:
        """Whether *our* process answers on the port (``INFO server``'s ``process_id``), not
        another server that took the port first."""
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return False
        try:
            writer.write(b"INFO server\r\n")
            head = await reader.readline()
            if not head.startswith(b"$"):
                return False
            info = await reader.readexactly(int(head[1:]) + 2)
            return self.proc is not None and f"process_id:{self.proc.pid}\r\n".encode() in info
        except (OSError, ValueError, asyncio.IncompleteReadError):
            return False
        finally:
            writer.close()

    async def __aenter__(self) -> PrivateRedis:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
