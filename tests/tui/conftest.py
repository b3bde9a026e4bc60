"""The real ``manage.py serve`` for the TUI pilot tests (``ServeProcess`` keeps its port across a
restart, so the client keeps dialling the right URL).
``until(pilot, predicate, what)`` waits for the UI; the timeout bounds a stuck test, it is not an
assertion on time. ``rest(server, token, method, path, body)`` calls the REST API (PROTOCOL §2) as
that token's user.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from tests.e2e.serve_process import ServeProcess, manage
from tui.widgets import Answer, Transcript

WAIT = 60.0  # seconds; generous for busy CI machines


async def start_server(data_dir: Path, env: dict[str, str]) -> tuple[ServeProcess, str]:
    """A started server and a token of user alice."""
    server = ServeProcess(data_dir, env)
    await server.start()
    token = manage(data_dir, "createtoken", "alice").strip().splitlines()[-1]
    return server, token


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ServeProcess, str]]:
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
