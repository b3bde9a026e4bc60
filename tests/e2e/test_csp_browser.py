"""The Content-Security-Policy in Chromium against the real ``serve`` (issue 16, "Must show" 4).

An injected inline script, an inline event handler and a script from another origin, placed in a
page the server answered (its own headers, its own policy), are refused by the browser: a
``securitypolicyviolation`` event is seen for each and none of their side effects happens. The
WebUI itself (login, send, stream, Markdown, code highlighting, images, reload), the admin and the
API docs (Swagger UI) work under the same policy with no violation and no CSP console message.

Violations are recorded by a script Playwright installs before the page's own (DevTools, so the
policy does not apply to it).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from providers.testing import LocalSSEServer, RecordedRequest, SSEResponse
from tests.e2e.markdown_samples import MARKDOWN_ANSWER, PYTHON_CODE
from tests.e2e.serve_process import ServeProcess, manage, openai_env
from tests.e2e.test_markdown_browser import Probe, streamed
from tests.e2e.test_webui_journeys import tiny_png

pytestmark = pytest.mark.e2e

TIMEOUT_MS = 30_000
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(
  {directive: e.effectiveDirective, blocked: e.blockedURI, sample: e.sample, disposition: e.disposition}));
"""


@pytest.fixture(autouse=True)
def _patient_expect() -> Iterator[None]:
    """A busy 2-core machine: every expect() waits up to TIMEOUT_MS."""
    try:
        from playwright.async_api import expect
    except ImportError:
        yield
        return
    expect.set_options(timeout=TIMEOUT_MS)
    yield
    expect.set_options(timeout=5_000)


@pytest.fixture
def probe() -> Iterator[Probe]:
    p = Probe()
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ServeProcess]:
    """The real server; its LLM streams Markdown with a highlighted code block."""

    def handler(request: RecordedRequest) -> SSEResponse:
        return streamed(MARKDOWN_ANSWER, 0.01)

    async with LocalSSEServer(handler=handler) as llm:
        data_dir = tmp_path / "data"
        data_dir.mkdir()
        proc = ServeProcess(data_dir, openai_env(llm) | {"PICOBOT_AUTO_TITLE_AFTER": "0"})
        try:
            await proc.start()
            yield proc
        finally:
            await proc.stop()
            print("---- serve output ----\n" + "".join(proc.output))


def csp_console_lines(page: Any) -> list[str]:
    return [line for line in page.console_log if "Content Security Policy" in line]


async def violations(page: Any) -> list[dict[str, str]]:
    return await page.evaluate("window.__violations")


async def test_an_injected_inline_script_handler_and_foreign_script_are_blocked(
    server: ServeProcess, page: Any, probe: Probe
) -> None:
    from playwright.async_api import expect

    injected = (
        "<script>window.__inline = 'ran';</script>"
        "<img id='bait' src='/static/no-such-image.png' onerror=\"window.__handler = 'ran'\">"
        "<a id='link' href=\"javascript:window.__href = 'ran'\">x</a>"
        f"<script src='{probe.url}/evil.js'></script>"
    )
    served_policy: list[str] = []

    async def inject(route: Any) -> None:
        response = await route.fetch()
        served_policy.append(response.headers.get("content-security-policy", ""))
        body = (await response.text()).replace("</body>", injected + "</body>")
        await route.fulfill(response=response, body=body)  # the server's own headers

    await page.add_init_script(RECORD_VIOLATIONS)
    await page.route(server.url + "login/", inject)
    await page.goto(server.url + "login/")
    await page.locator("#link").click()
    await page.wait_for_function("window.__violations.length >= 4", timeout=TIMEOUT_MS)
    await asyncio.sleep(0.5)  # anything that was going to run has run

    assert served_policy and "script-src 'self'" in served_policy[0], served_policy
    assert "unsafe-inline" not in served_policy[0].split("script-src")[1].split(";")[0]
    found = await violations(page)
    blocked = sorted(v["directive"] for v in found)
    assert blocked == ["script-src-attr", "script-src-elem", "script-src-elem", "script-src-elem"], found
    assert {v["disposition"] for v in found} == {"enforce"}
    assert f"{probe.url}/evil.js" in [v["blocked"] for v in found]
    side_effects = await page.evaluate("[window.__inline, window.__handler, window.__href, window.__foreign]")
    assert side_effects == [None, None, None, None]
    assert probe.hits == []  # the foreign script was never even requested
    assert len(csp_console_lines(page)) >= 4, page.console_log

    # Only the injected parts were refused: the page's own stylesheet applies, its form is there.
    await expect(page.get_by_test_id("login-submit")).to_be_visible()
    assert await page.evaluate("document.styleSheets.length") >= 1


async def test_the_webui_admin_and_api_docs_work_under_the_policy_with_no_violation(
    server: ServeProcess, page: Any
) -> None:
    from playwright.async_api import expect

    await page.add_init_script(RECORD_VIOLATIONS)
    password = "a-long-admin-password"
    await asyncio.to_thread(
        manage,
        server.data_dir,
        "createsuperuser",
        "--noinput",
        "--username",
        "root",
        "--email",
        "root@example.com",
        extra_env={"DJANGO_SUPERUSER_PASSWORD": password},
    )
    await page.goto(server.url + "login/")
    response = await page.request.get(server.url)
    assert "script-src 'self'" in response.headers["content-security-policy"]
    await page.get_by_test_id("login-username").fill("root")
    await page.get_by_test_id("login-password").fill(password)
    await page.get_by_test_id("login-submit").click()
    await expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "online")
    assert await page.evaluate("!!(window.markdownit && window.DOMPurify && window.hljs)")

    # Send with an image; the answer streams and renders Markdown with highlighted code.
    await page.get_by_test_id("file-input").set_input_files(
        [{"name": "dot.png", "mimeType": "image/png", "buffer": tiny_png()}]
    )
    await expect(page.get_by_test_id("attachment")).to_have_count(1)
    await page.get_by_test_id("composer").fill("Format something")
    await page.get_by_test_id("send").click()
    sent = page.locator('article[data-role="user"]', has_text="Format something")
    await page.wait_for_function(
        "(img) => img.complete && img.naturalWidth > 0",
        arg=await sent.locator("img.thumb").element_handle(),
        timeout=TIMEOUT_MS,
    )  # a data: URL thumbnail
    answer = page.locator('article[data-role="assistant"][data-message-id] [data-testid="answer"]')
    await expect(answer.locator(".code-block pre code")).to_have_text(PYTHON_CODE)
    await expect(answer.locator("span.hljs-keyword").first).to_have_text("def")
    await expect(answer.locator("table th")).to_have_text(["Name", "Value", "Share"])

    # After a reload the thumbnail is the served image (/api/…/media/0), loaded.
    await page.reload()
    await expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "online")
    thumb = page.locator('article[data-role="user"] img.thumb')
    await expect(thumb).to_have_attribute("src", re.compile(r"^/api/dialogs/.+/media/0$"))
    await page.wait_for_function(
        "(img) => img.complete && img.naturalWidth > 0", arg=await thumb.element_handle(), timeout=TIMEOUT_MS
    )
    await expect(answer.locator("span.hljs-keyword").first).to_have_text("def")
    assert await violations(page) == []

    # The admin (a change list, whose template has a <style> element) and the API docs.
    await page.goto(server.url + "admin/conversations/dialog/")
    await expect(page.locator("#result_list")).to_be_visible()
    assert await violations(page) == []
    await page.goto(server.url + "admin/model-presets/")  # the presets page (issue 17)
    await expect(page.locator("#model-presets")).to_be_visible()
    assert await violations(page) == []
    await page.goto(server.url + "admin/conversations/usagerecord/")  # usage with its totals (issue 17)
    await expect(page.locator("#changelist")).to_be_visible()
    assert await violations(page) == []
    await page.goto(server.url + "api/docs")
    await expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
    await expect(page.locator(".swagger-ui .opblock")).to_have_count(23)
    await asyncio.sleep(0.5)
    assert await violations(page) == []
    assert csp_console_lines(page) == [], page.console_log
    assert page.errors == []
