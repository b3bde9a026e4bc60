"""Browser fixtures for end-to-end tests: Debian's Chromium driven by Playwright.

Without a browser or Playwright, browser tests are skipped, unless ``PICOBOT_REQUIRE_BROWSER=1``
(CI) makes that a failure. ``playwright install`` is never used.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000


def _browser_or_skip() -> Any:
    """The ``async_playwright`` factory, or skip (fail under PICOBOT_REQUIRE_BROWSER=1)."""
    problem = None
    if not CHROMIUM.exists():
        problem = f"{CHROMIUM} is missing (apt-get install chromium)"
    try:
        from playwright.async_api import async_playwright
    except ImportError as exc:
        problem = problem or f"playwright is not importable ({exc}; pip install -r requirements-test.txt)"
    if problem:
        if os.environ.get("PICOBOT_REQUIRE_BROWSER") == "1":
            pytest.fail(f"PICOBOT_REQUIRE_BROWSER=1 but {problem}")
        pytest.skip(problem)
    return async_playwright


@pytest.fixture
async def page(tmp_path: Path) -> AsyncIterator[Any]:
    """A page in a fresh Chromium profile; uncaught page errors are collected on ``page.errors``."""
    async_playwright = _browser_or_skip()
    profile = tmp_path / "chromium-profile"
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 800},
        )
        try:
            pg = context.pages[0] if context.pages else await context.new_page()
            pg.set_default_timeout(TIMEOUT_MS)
            pg.errors = []
            pg.console_log = []
            pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))
            pg.on("console", lambda msg: pg.console_log.append(f"{msg.type}: {msg.text}"))
            yield pg
            print("---- browser console ----\n" + "\n".join(pg.console_log))
        finally:
            await context.close()
