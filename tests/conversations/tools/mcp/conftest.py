"""Fixtures of the MCP client tests: a ``PICOBOT_CONFIG`` file of ``[mcp_servers]``, the test
server (``mcp_test_server.py``, built with the official SDK) as a stdio command or as a
streamable HTTP server in a subprocess, and a worker whose MCP servers reconnect quickly."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conversations.runtime.provider import reset
from tests.ports import free_port_in

SERVER = Path(__file__).with_name("mcp_test_server.py")
PORTS = range(18100, 18200)


def server_table(name: str, **keys: object) -> str:
    """One ``[mcp_servers.NAME]`` table (JSON-written values are TOML ones; tables inline)."""

    def value(item: object) -> str:
        if isinstance(item, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {value(v)}" for k, v in item.items()) + "}"
        return json.dumps(item)

    return f"[mcp_servers.{name}]\n" + "".join(f"{key} = {value(item)}\n" for key, item in keys.items())


def stdio_table(name: str = "t", **keys: object) -> str:
    """The test server as a stdio server named ``name``."""
    return server_table(name, command=sys.executable, args=[str(SERVER)], **keys)


@pytest.fixture
def mcp_config(settings: object, tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``mcp_config(toml_text)`` makes ``toml_text`` the ``PICOBOT_CONFIG`` file; connects fast."""

    def use(text: str) -> Path:
        path = tmp_path / "picobot.toml"
        path.write_text(text, encoding="utf-8")
        settings.PICOBOT = settings.PICOBOT.replace(
            config=path, mcp_connect_timeout=20, mcp_refresh_seconds=0
        )
        reset()
        return path

    yield use
    reset()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[Callable[[], str]]:
    """``url = http_server()``: the test server over streamable HTTP in a subprocess."""
    processes: list[subprocess.Popen] = []

    def start() -> str:
        port = free_port_in(PORTS)
        log = open(tmp_path / f"http-{port}.log", "wb")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)], stdout=log, stderr=log)
        processes.append(process)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return f"http://127.0.0.1:{port}/mcp"
            assert process.poll() is None, (tmp_path / f"http-{port}.log").read_text()
            time.sleep(0.05)
        raise RuntimeError("the MCP test server did not listen")

    yield start
    for process in processes:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def worker_options(worker_id: str = "test-host:serve", **options: object) -> dict:
    """``tools`` and ``mcp`` for ``start_worker``: the default registry and a manager that
    reconnects within a fraction of a second."""
    from conversations.tools import default_registry
    from conversations.tools.mcp.sources import mcp_manager

    tools = default_registry()
    defaults = {"backoff": (0.1, 0.5), "ping_interval": 1.0}
    return {"tools": tools, "mcp": mcp_manager(tools, worker_id, **{**defaults, **options})}
