"""Logging out in one browser tab ends the other tabs' WebSockets (issue 16, Must show 3).

Two tabs of one logged-in user on the real ``serve``; "Log out" in the first. The second tab's
socket is closed by the server's revocation watch (close 4401, within
``REVOCATION_CHECK_SECONDS`` = 2 s; the time taken is printed, not asserted), the page goes to the
login form, and a socket opened with what is left of its cookies is refused: it cannot send.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.serve_process import ServeProcess, manage

pytestmark = pytest.mark.e2e

TIMEOUT_MS = 30_000

# Every WebSocket close of the tab, kept in sessionStorage (it survives the page's move to /login/).
RECORD_CLOSES = """
(() => {
  const Native = window.WebSocket;
  window.WebSocket = function (url, protocols) {
    const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
    ws.addEventListener('close', (ev) => {
      const seen = JSON.parse(sessionStorage.getItem('ws-closes') || '[]');
      seen.push({ code: ev.code, reason: ev.reason, at: Date.now() });
      sessionStorage.setItem('ws-closes', JSON.stringify(seen));
    });
    return ws;
  };
  Object.assign(window.WebSocket, Native);
  window.WebSocket.prototype = Native.prototype;
})();
"""

# Open a socket with the tab's cookies and report how it ends: 'ready' or the close code.
TRY_SOCKET = """
() => new Promise((resolve) => {
  const ws = new WebSocket(location.origin.replace('http', 'ws') + '/ws/chat/');
  const frames = [];
  ws.onmessage = (ev) => { frames.push(JSON.parse(ev.data)); if (frames[0].type === 'ready') ws.close(); };
  ws.onclose = (ev) => resolve({ code: ev.code, first: frames[0] || null });
})
"""


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ServeProcess]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    proc = ServeProcess(data_dir)
    try:
        await proc.start()
        yield proc
    finally:
        await proc.stop()
        print("---- serve output ----\n" + "".join(proc.output))


async def test_logging_out_in_one_tab_closes_the_other_tabs_socket(server: ServeProcess, page: Any) -> None:
    from playwright.async_api import expect

    created = await asyncio.to_thread(manage, server.data_dir, "createtoken", "tabby")
    token = created.strip().splitlines()[-1]
    await page.context.add_init_script(RECORD_CLOSES)

    await page.goto(server.url + "login/")
    await page.get_by_test_id("login-username").fill("tabby")
    await page.get_by_test_id("login-password").fill(token)
    await page.get_by_test_id("login-submit").click()
    await expect(page).to_have_url(server.url, timeout=TIMEOUT_MS)
    other = await page.context.new_page()
    await other.goto(server.url)
    for tab in (page, other):
        await expect(tab.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "online", timeout=TIMEOUT_MS
        )
    assert (await other.evaluate(TRY_SOCKET))["first"]["type"] == "ready", "the session opens sockets"

    logged_out_at = time.time() * 1000
    await page.get_by_test_id("logout").click()
    await expect(page).to_have_url(server.url + "login/", timeout=TIMEOUT_MS)
    logged_out_page_at = await page.evaluate("performance.timeOrigin")  # the login page's request

    await expect(other).to_have_url(f"{server.url}login/?next=%2F", timeout=TIMEOUT_MS)
    closes = await other.evaluate("JSON.parse(sessionStorage.getItem('ws-closes') || '[]')")
    revoked = [c for c in closes if c["code"] == 4401]
    assert revoked, f"the other tab's socket was closed by the server: {closes}"
    # Daphne sends no close reason (its serverClose takes a code only): the code says it.
    print(
        f"the other tab's socket closed {revoked[0]['at'] - logged_out_at:.0f} ms after the logout click, "
        f"{revoked[0]['at'] - logged_out_page_at:.0f} ms after the logout's redirect was followed"
    )

    refused = await other.evaluate(TRY_SOCKET)
    assert refused["code"] == 4401 and refused["first"]["code"] == "unauthorized", "it cannot send any more"
