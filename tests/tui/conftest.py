"""The real ``manage.py serve`` for the TUI pilot tests, on a port that survives a restart.

``ServeOnPort`` is ``tests.e2e.serve_process.ServeProcess`` bound to a fixed port after its first
start (port 0 picks a free one), so a restarted server has the URL the client keeps dialling.
``until(pilot, predicate, what)`` waits for the UI; the timeout bounds a stuck test, it is not an
assertion on time. ``rest(server, token, method, path, body)`` calls the REST API (PROTOCOL §2) as
that token's user.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from tests.e2e.serve_process import REPO, URL_LINE, ServeProcess, manage, server_env
from tui.widgets import Answer, Transcript

WAIT = 60.0  # seconds; generous for busy CI machines


class ServeOnPort(ServeProcess):
    """``ServeProcess`` that keeps its first port across ``stop()`` / ``start()``."""

    port = 0

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
        match = None
        async with asyncio.timeout(timeout):
            while match is None:
                line = await self.proc.stdout.readline()
                if not line:
                    raise RuntimeError("serve exited before announcing its URL:\n" + "".join(self.output))
                self.output.append(line.decode(errors="replace"))
                match = URL_LINE.search(self.output[-1])
        self.url = match.group(1).replace("localhost", "127.0.0.1")
        self.port = urlsplit(self.url).port or 0
        self._drain = asyncio.ensure_future(self._drain_output())


async def start_server(data_dir: Path, env: dict[str, str]) -> tuple[ServeOnPort, str]:
    """A started server and a token of user alice."""
    server = ServeOnPort(data_dir, env)
    await server.start()
    token = manage(data_dir, "createtoken", "alice").strip().splitlines()[-1]
    return server, token


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ServeOnPort, str]]:
    """The replay provider streaming one event every 0.1 s (visible phases)."""
    server, token = await start_server(tmp_path, {"PICOBOT_REPLAY_EVENT_DELAY": "0.1"})
    try:
        yield server, token
    finally:
        await server.stop()


async def until(pilot: Pilot, predicate: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    """Pause the pilot until ``predicate()`` is true; fails naming ``what`` and the screen."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await pilot.pause(0.05)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}; transcript:\n{transcript_text(pilot.app)}")


def transcript_text(app: object) -> str:
    """Every text line and Markdown source in the transcript, in order."""
    out = []
    for widget in app.query_one(Transcript).query("*"):  # type: ignore[attr-defined]
        if isinstance(widget, Answer):
            out.append(widget.text)
        elif isinstance(widget, Static) and not widget.parent.__class__.__name__.startswith("Collapsible"):
            out.append(str(widget.content))
    return "\n".join(out)


def static_text(app: object, selector: str) -> str:
    return str(app.query_one(selector, Static).content)  # type: ignore[attr-defined]


async def rest(server: ServeProcess, token: str, method: str, path: str, body: Any = None) -> Any:
    """``METHOD /api/<path>`` with the Bearer token; the decoded JSON answer (None for 204).
    Raises urllib's HTTPError on an error status."""

    def call() -> Any:
        request = urllib.request.Request(
            server.url + "api/" + path,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method=method,
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    return await asyncio.to_thread(call)


def dialog_path(session_id: str) -> str:
    return "dialogs/" + quote(session_id, safe="")
