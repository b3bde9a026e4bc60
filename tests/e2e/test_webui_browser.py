"""The WebUI in a real browser against the real ``serve`` process.

With no LLM configured the offline replay provider answers, and the page says so. Playwright
drives Debian's Chromium (``/usr/bin/chromium``; ``playwright install`` is never used). Without a
browser or Playwright the test is skipped, unless ``PICOBOT_REQUIRE_BROWSER=1`` (CI) makes that a
failure. The server runs in its own process with its own SQLite database, so no pytest-django
database fixture is involved.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.serve_process import REPO, ServeProcess, manage

pytestmark = pytest.mark.e2e

SHARED_SCREENSHOT = Path("/tmp/picobot-webui.png")
QUESTION = "What time is it?"
# The closing line of the replayed answer (providers/transcripts/after_tool.sse).
OFFLINE_MARK = "Answered by the offline replay provider."
TIMEOUT_MS = 30_000


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ServeProcess]:
    """The real server with the replay provider (no PICOBOT_LLM_* in its environment)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    proc = ServeProcess(data_dir)
    try:
        await proc.start()
        yield proc
    finally:
        await proc.stop()
        # Shown by pytest only when the test fails.
        print("---- serve output ----\n" + "".join(proc.output))


async def test_offline_replay_answers_in_the_webui(server: ServeProcess, page: Any, tmp_path: Path) -> None:
    from playwright.async_api import expect

    created = await asyncio.to_thread(manage, server.data_dir, "createtoken", "alice")
    token = created.strip().splitlines()[-1]

    # Log in with the API token as the password; land on the chat.
    await page.goto(server.url + "login/")
    await page.get_by_test_id("login-username").fill("alice")
    await page.get_by_test_id("login-password").fill(token)
    await page.get_by_test_id("login-submit").click()
    await expect(page).to_have_url(server.url, timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("user")).to_have_text("alice")

    # No LLM configured: labelled offline, and the WebSocket session is up.
    badge = page.get_by_test_id("offline-badge")
    await expect(badge).to_be_visible()
    await expect(badge).to_have_text(re.compile(r"offline", re.I))
    await expect(badge).to_have_text(re.compile(r"replay", re.I))
    status = page.get_by_test_id("connection-status")
    await expect(status).to_have_attribute("data-state", "online", timeout=TIMEOUT_MS)

    # Ask; wait for the committed answer (a history row has a message id, the live turn has none).
    await page.get_by_test_id("composer").fill(QUESTION)
    await page.get_by_test_id("send").click()
    messages = page.get_by_test_id("message-list")
    answer_row = messages.locator(
        'article[data-role="assistant"][data-status="completed"][data-message-id]',
        has=page.get_by_test_id("answer"),
    )
    await expect(answer_row).to_have_count(1, timeout=TIMEOUT_MS)
    answer = answer_row.get_by_test_id("answer")
    await expect(answer).to_contain_text(OFFLINE_MARK)

    # The tool ran and is shown as completed.
    tool = messages.locator('[data-testid="tool"][data-status="completed"]', has_text="current_time")
    await expect(tool.first).to_be_visible()

    # Reasoning is shown, collapsed: a <details> that is not open. The turn is one card: the
    # thoughts before the tool call and those before the answer (one per model call).
    reasoning = answer_row.locator('details[data-testid="reasoning"]')
    await expect(reasoning).to_have_count(2)
    reasoning = reasoning.last
    assert await reasoning.evaluate("el => el.open") is False
    await expect(reasoning.locator(".reasoning-text")).to_be_hidden()
    await expect(reasoning.locator(".reasoning-text")).to_have_text(
        re.compile("The tool returned the current time")
    )

    text = await answer.inner_text()
    years = {str(datetime.now(UTC).year), str(datetime.now().year)}
    assert any(y in text for y in years), f"no current year {years} in answer: {text!r}"
    assert "current_time" in text and "offline replay provider" in text
    for shown in (text, await messages.inner_text()):
        assert "<think>" not in shown and "</think>" not in shown, shown

    shot = tmp_path / "webui-answer.png"
    await page.screenshot(path=str(shot), full_page=True)
    shutil.copyfile(shot, SHARED_SCREENSHOT)

    # After a reload the conversation comes back from history.
    await page.reload()
    await expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "online")
    user_row = messages.locator('article[data-role="user"][data-message-id]', has_text=QUESTION)
    await expect(user_row).to_have_count(1)
    await expect(answer_row).to_have_count(1)
    await expect(answer_row.get_by_test_id("answer")).to_contain_text(OFFLINE_MARK)
    await expect(
        messages.locator('[data-testid="tool"][data-status="completed"]', has_text="current_time").first
    ).to_be_visible()
    await page.screenshot(path=str(tmp_path / "webui-reloaded.png"), full_page=True)

    assert page.errors == [], f"uncaught errors in the page: {page.errors}"
    assert OFFLINE_MARK in (REPO / "providers" / "transcripts" / "after_tool.sse").read_text()
