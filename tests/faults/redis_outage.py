"""The Redis outage fault: the scale-out channel layer on a private ``redis-server`` that stops
while turn A streams and comes back a second later (issue 16 "Layer outages").

The server is this test's own (a free port in 6380–6389, no persistence), never the shared one
on 6379. Without a ``redis-server`` binary the cells skip, or fail under
``PICOBOT_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess

import pytest
from channels.layers import channel_layers

from tests.faults.rig import FaultPlan, Rig, read_rows
from tests.ports import free_port_in

PORTS = range(6380, 6390)
DOWN_SECONDS = 1.0


class PrivateRedis:
    """A ``redis-server`` of this test on ``port``: ``start()``, ``stop()`` (SIGTERM, waited)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self.proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once; readiness is polled below
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        async with asyncio.timeout(10):
            while True:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                        return
                await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            await asyncio.to_thread(self.proc.wait, 10)


async def redis_layer(rig: Rig) -> None:
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed; the Redis outage cells need it"
        if os.environ.get("PICOBOT_REQUIRE_SERVICES") == "1":
            pytest.fail(message + " (PICOBOT_REQUIRE_SERVICES=1)")
        pytest.skip(message)
    rig.redis = PrivateRedis(free_port_in(PORTS))
    await rig.redis.start()
    rig.settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "delivery.redis_outages.OutageTolerantRedisChannelLayer",  # as settings.py with Redis
            "CONFIG": {"hosts": [{"address": rig.redis.url, "max_connections": 50}]},
        }
    }
    channel_layers.backends = {}


async def restart_redis_while_a_streams(rig: Rig) -> None:
    async with asyncio.timeout(20):
        while not [row for row in (await read_rows())[0] if row["status"] == "started"]:  # noqa: ASYNC110
            await asyncio.sleep(0.02)  # polling the database
    await asyncio.sleep(0.3)
    await rig.redis.stop()
    await asyncio.sleep(DOWN_SECONDS)
    await rig.redis.start()


async def stop_redis(rig: Rig) -> None:
    redis = getattr(rig, "redis", None)
    if redis is not None:
        with contextlib.suppress(Exception):
            await redis.stop()
    channel_layers.backends = {}


PLAN = {
    "layer-redis-down": lambda: FaultPlan(
        setup=redis_layer,
        during=restart_redis_while_a_streams,
        cleanup=stop_redis,
        answer_words=200,
        answer_delay=0.01,
    )
}
