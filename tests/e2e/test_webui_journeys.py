"""What a person does in the WebUI, in Chromium against the real ``serve`` process (issue 14).

Each journey keeps a screenshot of every step (``tests/e2e/artefacts.py``: under
``var/test-artefacts/<test>/``). Slow, stopped and failed turns come from a local
OpenAI-compatible server (``LocalSSEServer``) whose answers are paced so the page shows them
live; the rest uses the offline replay provider ("What time is it?": reasoning, a
``current_time`` call, an answer).
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from providers.testing import (
    LocalSSEServer,
    RecordedRequest,
    SSEResponse,
    openai_events,
    split_events,
    sse_body,
)
from tests.conversations.streams import answer_pieces, tool_call_pieces
from tests.e2e.artefacts import shot
from tests.e2e.serve_process import ServeProcess, manage, openai_env

pytestmark = pytest.mark.e2e

TIMEOUT_MS = 30_000
TIME_QUESTION = "What time is it?"
STORY = "Tell me a long story"
FLAKY = "Will this fail?"
KEEP_GOING = "Keep going for a while"
MANY_LINES = "Write many lines"
LINES_TEXT = "\n\n".join(f"Line {n} of a long answer." for n in range(1, 61))
STORY_TEXT = " ".join(f"word{n}" for n in range(200))


def paced(pieces: list[bytes], delay: float) -> SSEResponse:
    return SSEResponse(200, {"content-type": "text/event-stream"}, pieces, delay)


def last_user_text(body: dict) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    content = users[-1]["content"] if users else ""
    if isinstance(content, list):
        content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content


class ScriptedLLM:
    """Answers by the user's last message: the time turn paced, a story slow enough to stop,
    a first "Will this fail?" with HTTP 500 and the retry with an answer."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()
        self.images: list[int] = []  # images in the last user message of each request

    async def __call__(self, request: RecordedRequest) -> SSEResponse:
        body = request.json() or {}
        text = last_user_text(body)
        tool_results = [m for m in body.get("messages", []) if m.get("role") == "tool"]
        asked = next((q for q in (TIME_QUESTION, STORY, KEEP_GOING, FLAKY, MANY_LINES) if q in text), text)
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        parts = users[-1].get("content") if users else None
        self.images.append(
            sum(1 for p in parts if p.get("type") == "image_url") if isinstance(parts, list) else 0
        )
        self.asked[asked] += 1
        if asked == TIME_QUESTION:
            return paced(answer_pieces() if tool_results else tool_call_pieces(), 0.25)
        if asked in (STORY, KEEP_GOING):
            return paced(split_events(sse_body(openai_events(STORY_TEXT, reasoning="Let me think."))), 0.25)
        if asked == MANY_LINES:
            return paced(split_events(sse_body(openai_events(LINES_TEXT))), 0.04)
        if asked == FLAKY and self.asked[FLAKY] == 1:
            error = b'{"error": {"message": "upstream exploded", "type": "server_error"}}'
            return SSEResponse(500, {"content-type": "application/json"}, [error], chunked=False)
        return paced(split_events(sse_body(openai_events("Recovered: here is the answer."))), 0.02)


@pytest.fixture
async def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    await asyncio.to_thread(manage, path, "migrate", "--noinput")
    return path


@pytest.fixture
async def replay_server(data_dir: Path) -> AsyncIterator[ServeProcess]:
    server = ServeProcess(data_dir)
    try:
        await server.start()
        yield server
    finally:
        await server.stop()
        print("---- serve output ----\n" + "".join(server.output))


@pytest.fixture
async def llm_server(data_dir: Path) -> AsyncIterator[tuple[ServeProcess, ScriptedLLM]]:
    script = ScriptedLLM()
    async with LocalSSEServer(handler=script) as llm:
        server = ServeProcess(data_dir, openai_env(llm))
        try:
            await server.start()
            yield server, script
        finally:
            await server.stop()
            print("---- serve output ----\n" + "".join(server.output))


async def token_for(data_dir: Path, username: str = "alice") -> str:
    return (await asyncio.to_thread(manage, data_dir, "createtoken", username)).strip().splitlines()[-1]


def create_dialog(server: ServeProcess, token: str, title: str) -> dict:
    request = urllib.request.Request(
        server.url + "api/dialogs",
        data=json.dumps({"title": title}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


async def log_in(page: Any, server: ServeProcess, token: str) -> None:
    from playwright.async_api import expect

    await page.goto(server.url + "login/")
    await page.get_by_test_id("login-username").fill("alice")
    await page.get_by_test_id("login-password").fill(token)
    await page.get_by_test_id("login-submit").click()
    await expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "online")


async def send(page: Any, text: str) -> None:
    composer = page.get_by_test_id("composer")
    await composer.fill(text)
    await composer.press("Enter")


def turn_with(page: Any, text: str) -> Any:
    """The turn card answering the user message ``text`` (the card after that message)."""
    return page.locator(f'article[data-role="user"]:has-text("{text}") + article[data-role="assistant"]').last


async def transcript(page: Any) -> list[tuple[str, str, str]]:
    """(role, status, text of its note or answer or bubble) per message: what must converge."""
    return await page.eval_on_selector_all(
        '[data-testid="message-list"] > article',
        """els => els.map((el) => [el.dataset.role, el.dataset.status,
             ((el.querySelector('[data-testid="turn-error"]') || {}).textContent || '') + '|' +
             [...el.querySelectorAll('[data-testid="answer"], .bubble')].map((x) => x.textContent).join('/')])""",
    )


async def test_sidebar_with_30_dialogs_send_rename_delete_switch_search_and_reload(
    replay_server: ServeProcess, data_dir: Path, page: Any
) -> None:
    from playwright.async_api import expect

    token = await token_for(data_dir)
    for n in range(1, 31):
        await asyncio.to_thread(create_dialog, replay_server, token, f"Trip {n:02d}")
    await log_in(page, replay_server, token)
    sidebar = page.locator("#sidebar")
    items = page.get_by_test_id("session-item")
    oldest = items.filter(has_text="Trip 01")
    await expect(items.first).to_be_visible()
    await expect(page.get_by_test_id("session-group").first).to_have_text("Today")
    assert await items.count() < 30 and await oldest.count() == 0, "the first page is not all of them"
    await shot(page, "sidebar-first-page")

    # The oldest is reachable by scrolling the sidebar (the next page loads at its end).
    await sidebar.evaluate("el => el.scrollTop = el.scrollHeight")
    await expect(oldest).to_have_count(1)
    await expect(items).to_have_count(await items.count())
    assert await items.count() >= 30
    await oldest.scroll_into_view_if_needed()
    await shot(page, "sidebar-scrolled-to-the-oldest")

    # ... and by a search on the server (case-insensitive).
    search = page.get_by_test_id("session-search")
    await search.fill("trip 0")
    await expect(items).to_have_count(9)
    await search.fill("TRIP 01")
    await expect(items).to_have_count(1)
    await shot(page, "search-finds-the-oldest")

    # Switch to it from the sidebar: the header names it, the sidebar marks it.
    await oldest.click()
    await expect(page.get_by_test_id("dialog-title")).to_have_text("Trip 01")
    await expect(oldest).to_have_attribute("aria-current", "true")
    await search.press("Escape")
    await expect(search).to_have_value("")
    await expect(items.filter(has_text="Trip 29")).to_have_count(1)

    # Send; the replayed turn (reasoning, a tool call, an answer) lands as one card.
    await send(page, TIME_QUESTION)
    card = turn_with(page, TIME_QUESTION)
    await expect(card).to_have_attribute("data-message-id", re.compile(r".+"), timeout=TIMEOUT_MS)
    await expect(card.get_by_test_id("answer")).to_contain_text("offline replay provider")
    tool = card.get_by_test_id("tool")
    await expect(tool).to_have_count(1)
    await expect(tool).to_have_attribute("data-status", "completed")
    await tool.locator("summary").click()
    await expect(tool.get_by_test_id("tool-result")).to_be_visible()
    reasoning = card.get_by_test_id("reasoning").first
    await reasoning.locator("summary").click()
    assert await reasoning.evaluate("el => el.open")
    await expect(card.get_by_test_id("message-time")).to_have_attribute("title", re.compile(r"\d{4}"))
    await shot(page, "answer-with-tool-card-and-thoughts-expanded")

    # Rename the dialog inline from the sidebar.
    row = page.get_by_test_id("session-row").filter(has=page.locator('[aria-current="true"]'))
    await row.hover()
    await row.get_by_test_id("rename-dialog").click()
    await page.get_by_test_id("rename-input").fill("Rome in spring")
    await page.get_by_test_id("rename-input").press("Enter")
    await expect(page.get_by_test_id("dialog-title")).to_have_text("Rome in spring")
    await expect(items.filter(has_text="Rome in spring")).to_have_count(1)
    await shot(page, "renamed-from-the-sidebar")

    # Delete another dialog, with a confirm; cancelling first keeps it.
    victim = page.get_by_test_id("session-row").filter(has_text="Trip 30")
    await victim.hover()
    await victim.get_by_test_id("delete-dialog").click()
    await shot(page, "delete-asks-first")
    await page.get_by_test_id("cancel-delete").click()
    await expect(items.filter(has_text="Trip 30")).to_have_count(1)
    await victim.hover()
    await victim.get_by_test_id("delete-dialog").click()
    await page.get_by_test_id("confirm-delete").click()
    await expect(items.filter(has_text="Trip 30")).to_have_count(0)
    await expect(page.get_by_test_id("dialog-title")).to_have_text("Rome in spring")

    # A typed /sessions lists dialogs in the transcript; one click switches.
    await send(page, "/sessions")
    listed = page.get_by_test_id("system-line").filter(has_text="Your dialogs")
    await expect(listed).to_have_count(1)
    await listed.get_by_test_id("system-session").filter(has_text="Trip 29").click()
    await expect(page.get_by_test_id("dialog-title")).to_have_text("Trip 29")
    await shot(page, "switched-from-the-sessions-list")

    # Back and reload: the same transcript, the new title.
    await items.filter(has_text="Rome in spring").click()
    await expect(page.get_by_test_id("dialog-title")).to_have_text("Rome in spring")
    await expect(card).to_be_visible()
    before = await transcript(page)
    await page.reload()
    await expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "online")
    await expect(page.get_by_test_id("dialog-title")).to_have_text("Rome in spring")
    await expect(turn_with(page, TIME_QUESTION).get_by_test_id("answer")).to_be_visible()
    assert await transcript(page) == before
    await shot(page, "after-reload")
    assert page.errors == []


async def test_watch_a_turn_stream_stop_one_retry_a_failed_one_and_reload_keeps_them_marked(
    llm_server: tuple[ServeProcess, ScriptedLLM], data_dir: Path, page: Any
) -> None:
    from playwright.async_api import expect

    server, script = llm_server
    await log_in(page, server, await token_for(data_dir))
    await expect(page.get_by_test_id("provider")).to_have_text("openai · test-model")

    # Live: thinking, then the tool card running and done, then the answer, all in one card.
    await send(page, TIME_QUESTION)
    card = turn_with(page, TIME_QUESTION)
    await expect(card.get_by_test_id("turn-phase")).to_be_visible()
    await expect(card.get_by_test_id("reasoning").first).to_contain_text("current_time")
    await shot(page, "streaming-thoughts")
    tool = card.get_by_test_id("tool")
    await expect(tool).to_have_attribute("data-status", "completed", timeout=TIMEOUT_MS)
    await expect(card.get_by_test_id("answer")).to_be_visible()
    await shot(page, "streaming-answer-after-the-tool")
    await expect(card).to_have_attribute("data-status", "completed", timeout=TIMEOUT_MS)
    live_height = (await card.bounding_box())["height"]
    await expect(card).to_have_attribute("data-message-id", re.compile(r".+"))
    await page.wait_for_timeout(300)
    committed_height = (await card.bounding_box())["height"]
    assert abs(committed_height - live_height) <= 2, "the card keeps its size at commit"
    assert await card.get_by_test_id("tool").count() == 1
    await shot(page, "committed-same-size")

    # Stop with Esc while the story streams: "Stopped" once, the partial text kept.
    await send(page, STORY)
    story = turn_with(page, STORY)
    await expect(story.get_by_test_id("answer")).to_contain_text("word3", timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("stop")).to_be_visible()
    await page.get_by_test_id("composer").press("Escape")
    note = story.get_by_test_id("turn-error")
    await expect(note).to_have_text("Stopped", timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("stop")).to_be_hidden()
    assert "Stopped: stopped" not in await page.get_by_test_id("message-list").inner_text()
    await shot(page, "stopped")

    # A failed turn says why and offers a retry, which sends the text again as a new message.
    await send(page, FLAKY)
    failed = turn_with(page, FLAKY)
    await expect(failed.get_by_test_id("turn-error")).to_have_text(re.compile(r"^Failed"), timeout=TIMEOUT_MS)
    await shot(page, "failed")
    await failed.get_by_test_id("retry-turn").click()
    await expect(page.locator('article[data-role="user"]', has_text=FLAKY)).to_have_count(2)
    first_failure = page.locator(
        'article[data-role="assistant"]', has=page.get_by_test_id("turn-error")
    ).filter(has_text="Failed")
    await expect(first_failure.get_by_test_id("retry-turn")).to_have_count(0)
    await expect(first_failure.get_by_test_id("retried")).to_be_visible()
    await expect(turn_with(page, FLAKY).get_by_test_id("answer")).to_contain_text(
        "Recovered", timeout=TIMEOUT_MS
    )
    assert script.asked[FLAKY] == 2
    await shot(page, "retried")

    # Reload: the stopped and the failed turn are still marked.
    await expect(turn_with(page, FLAKY)).to_have_attribute("data-message-id", re.compile(r".+"))
    before = await transcript(page)
    await page.reload()
    await expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "online")
    await expect(turn_with(page, STORY).get_by_test_id("turn-error")).to_have_text("Stopped")
    flaky_notes = page.get_by_test_id("turn-error").filter(has_text="Failed")
    await expect(flaky_notes).to_have_count(1)
    await expect(page.get_by_test_id("retry-turn")).to_have_count(0)
    await expect(page.get_by_test_id("retried")).to_have_count(1)  # the used Retry stays used
    assert await transcript(page) == before
    await shot(page, "reloaded-outcomes-kept")
    assert page.errors == []


async def test_the_page_reconnects_and_converges_after_the_server_is_killed_mid_turn(
    llm_server: tuple[ServeProcess, ScriptedLLM], data_dir: Path, page: Any
) -> None:
    from playwright.async_api import expect

    server, _ = llm_server
    await log_in(page, server, await token_for(data_dir))
    await send(page, KEEP_GOING)
    card = turn_with(page, KEEP_GOING)
    await expect(card.get_by_test_id("answer")).to_contain_text("word2", timeout=TIMEOUT_MS)
    await shot(page, "streaming-before-the-kill")

    await server.kill()
    status = page.get_by_test_id("connection-status")
    await expect(status).to_have_attribute("data-state", "offline")
    await shot(page, "server-gone")
    server.port = int(server.url.rstrip("/").rsplit(":", 1)[1])
    await server.start()

    await expect(status).to_have_attribute("data-state", "online", timeout=TIMEOUT_MS)
    await expect(card.get_by_test_id("turn-error")).to_have_text(
        re.compile(r"^Interrupted"), timeout=TIMEOUT_MS
    )
    await expect(card).not_to_have_attribute("aria-busy", "true")
    await expect(page.get_by_test_id("stop")).to_be_hidden()
    await shot(page, "reconnected-and-interrupted")

    # Converged: what a fresh page shows.
    fresh = await page.context.new_page()
    await fresh.goto(server.url)
    await expect(fresh.get_by_test_id("connection-status")).to_have_attribute("data-state", "online")
    await expect(turn_with(fresh, KEEP_GOING).get_by_test_id("turn-error")).to_be_visible()
    assert await transcript(page) == await transcript(fresh)
    await shot(fresh, "a-fresh-page-shows-the-same")
    assert page.errors == []


async def test_on_a_360px_phone_help_leaves_the_header_and_composer_visible(
    replay_server: ServeProcess, data_dir: Path, page: Any
) -> None:
    from playwright.async_api import expect

    await page.set_viewport_size({"width": 360, "height": 740})
    await log_in(page, replay_server, await token_for(data_dir))
    await page.get_by_test_id("composer").fill("/he")
    await expect(page.get_by_test_id("command-completion")).to_be_visible()
    await expect(page.get_by_test_id("completion-item")).to_have_text(re.compile(r"^/help"))
    await shot(page, "phone-command-completion")
    composer = page.get_by_test_id("composer")
    assert await composer.evaluate("(el) => el.scrollHeight <= el.clientHeight + 1"), "the placeholder fits"
    await composer.press("Enter")  # /help takes no argument: sent at once
    help_line = page.get_by_test_id("system-line").filter(has_text="/switch")
    await expect(help_line).to_be_visible()
    await expect(composer).to_have_value("")
    await composer.fill("/ren")
    await composer.press("Enter")  # /rename needs a title: completed, not sent
    await expect(composer).to_have_value("/rename ")
    await composer.fill("")
    await send(page, "/nonsense")
    await expect(page.get_by_test_id("system-line").filter(has_text="Unknown command")).to_be_visible()
    echoes = page.get_by_test_id("command-echo")
    await expect(echoes).to_have_text(["/help", "/nonsense"])
    await shot(page, "phone-after-help")

    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 360, f"the page scrolls sideways ({width} px)"
    for testid in ("dialog-title", "sidebar-toggle", "composer", "send"):
        element = page.get_by_test_id(testid)
        await expect(element).to_be_in_viewport()
        # Nothing on top of it: the element itself is what a tap at its centre hits.
        hit = await element.evaluate(
            """(el) => { const r = el.getBoundingClientRect();
                 const top = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
                 return el === top || el.contains(top); }"""
        )
        assert hit, f"{testid} is covered"

    # The drawer names the user and the model and has the way out.
    await page.get_by_test_id("sidebar-toggle").click()
    for testid in ("user", "provider", "logout"):
        await expect(page.get_by_test_id(testid)).to_be_in_viewport()
    await expect(page.get_by_test_id("user")).to_have_text("alice")
    await page.wait_for_timeout(300)  # the drawer's slide
    await shot(page, "phone-drawer-with-log-out")
    await page.get_by_test_id("logout").click()
    await expect(page.get_by_test_id("login-username")).to_be_visible()
    assert page.errors == []


def tiny_png() -> bytes:
    """A valid 1×1 PNG (the server checks an image's bytes against its type)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0\xff\0\0"))
        + chunk(b"IEND", b"")
    )


async def test_images_attach_as_thumbnails_and_too_big_or_not_an_image_is_refused_clearly(
    replay_server: ServeProcess, data_dir: Path, page: Any
) -> None:
    from playwright.async_api import expect

    await log_in(page, replay_server, await token_for(data_dir))
    files = page.get_by_test_id("file-input")
    error = page.get_by_test_id("composer-error")
    await files.set_input_files([{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hello"}])
    await expect(error).to_contain_text("not an image")
    big = {"name": "huge.png", "mimeType": "image/png", "buffer": tiny_png() + b"\0" * (5 * 1024 * 1024)}
    await files.set_input_files([big])
    await expect(error).to_contain_text("too big")
    fake = {"name": "fake.png", "mimeType": "image/png", "buffer": b"just some text, not a picture"}
    await files.set_input_files([fake])
    await expect(error).to_contain_text("not a readable PNG, JPEG, GIF or WebP image")
    await expect(page.get_by_test_id("attachment")).to_have_count(0)
    await shot(page, "fake-image-refused")
    await files.set_input_files([{"name": "dot.png", "mimeType": "image/png", "buffer": tiny_png()}])
    await expect(page.get_by_test_id("attachment")).to_have_count(1)
    await expect(error).to_be_hidden()
    await shot(page, "image-attached")

    await send(page, "What is in this picture?")
    sent = page.locator('article[data-role="user"]', has_text="What is in this picture?")
    await expect(sent.locator("img.thumb")).to_have_count(1)
    await expect(page.get_by_test_id("attachment")).to_have_count(0)
    await expect(turn_with(page, "What is in this picture?")).to_have_attribute(
        "data-message-id", re.compile(r".+")
    )
    await expect(sent).to_have_attribute("data-message-id", re.compile(r".+"))
    await expect(sent.locator("img.thumb")).to_have_count(1)
    # Committed: the thumbnail it was sent with stays (no reload, no jump) and links to the image.
    link = sent.get_by_test_id("message-image")
    await expect(link).to_have_attribute("href", re.compile(r"^/api/dialogs/[^/]+/messages/[^/]+/media/0$"))
    await expect(link).to_have_attribute("target", "_blank")
    await shot(page, "image-sent")

    # Reload: history names the image by URL; the thumbnail is there again and its image loads.
    box = await sent.locator("img.thumb").bounding_box()
    await page.reload()
    await expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "online")
    reloaded = page.locator('article[data-role="user"]', has_text="What is in this picture?")
    thumb = reloaded.locator("img.thumb")
    await expect(thumb).to_have_count(1)
    await expect(thumb).to_have_attribute("src", re.compile(r"^/api/dialogs/.+/media/0$"))
    await page.wait_for_function(
        "(img) => img.complete && img.naturalWidth > 0", arg=await thumb.element_handle(), timeout=TIMEOUT_MS
    )
    after = await thumb.bounding_box()
    assert (after["width"], after["height"]) == (box["width"], box["height"]), "the same look as before"
    full = await page.request.get(await reloaded.get_by_test_id("message-image").evaluate("(a) => a.href"))
    assert full.status == 200 and full.headers["content-type"] == "image/png"
    assert await full.body() == tiny_png()
    await shot(page, "image-after-reload")

    # Images alone: sent with no text, answered, and the dialog is told apart by its preview.
    await files.set_input_files([{"name": "dot.png", "mimeType": "image/png", "buffer": tiny_png()}])
    await page.get_by_test_id("send").click()
    only = page.locator('article[data-role="user"]').last
    await expect(only.locator("img.thumb")).to_have_count(1)
    await expect(only).to_have_attribute("data-message-id", re.compile(r".+"), timeout=TIMEOUT_MS)
    await expect(page.locator('article[data-role="assistant"]').last).to_have_attribute(
        "data-message-id", re.compile(r".+"), timeout=TIMEOUT_MS
    )
    await expect(page.get_by_test_id("session-preview")).to_have_text("What is in this picture?")
    copy = page.locator('article[data-role="assistant"]').last.get_by_test_id("copy")
    await expect(copy.locator("svg")).to_have_count(1)
    await shot(page, "image-only-message-answered")
    await page.set_viewport_size({"width": 360, "height": 740})
    await page.wait_for_timeout(300)  # the sidebar slides away
    await shot(page, "phone-image-only-message")
    assert page.errors == []


async def test_newest_while_an_answer_streams_lands_at_the_bottom_and_keeps_following(
    llm_server: tuple[ServeProcess, ScriptedLLM], data_dir: Path, page: Any
) -> None:
    from playwright.async_api import expect

    server, _ = llm_server
    await page.set_viewport_size({"width": 1280, "height": 600})
    await log_in(page, server, await token_for(data_dir))
    await send(page, MANY_LINES)
    card = turn_with(page, MANY_LINES)
    await expect(card.get_by_test_id("answer")).to_contain_text("Line 20", timeout=TIMEOUT_MS)
    scroller = page.get_by_test_id("messages")
    await scroller.evaluate("(el) => { el.scrollTop = 0; }")
    jump = page.get_by_test_id("jump-to-newest")
    await expect(jump).to_be_visible()
    await shot(page, "scrolled-up-while-streaming")
    await jump.click()
    assert await card.get_attribute("data-status") == "running", "clicked while it streams"
    await expect(card).to_have_attribute("data-status", "completed", timeout=TIMEOUT_MS)
    await expect(card.get_by_test_id("answer")).to_contain_text("Line 60")
    await page.wait_for_timeout(300)
    gap = await scroller.evaluate("(el) => el.scrollHeight - el.scrollTop - el.clientHeight")
    assert gap < 2, f"{gap} px above the bottom"
    await expect(jump).to_be_hidden()
    await shot(page, "followed-to-the-end")
    assert page.errors == []


async def test_retry_of_a_failed_turn_with_an_image_resends_the_image(
    llm_server: tuple[ServeProcess, ScriptedLLM], data_dir: Path, page: Any
) -> None:
    """A failed turn's Retry sends its text and its images again (fetched back by their URL)."""
    from playwright.async_api import expect

    server, script = llm_server
    await log_in(page, server, await token_for(data_dir))
    files = page.get_by_test_id("file-input")
    await files.set_input_files([{"name": "dot.png", "mimeType": "image/png", "buffer": tiny_png()}])
    await send(page, FLAKY)
    failed = turn_with(page, FLAKY)
    await expect(failed.get_by_test_id("turn-error")).to_contain_text("Failed", timeout=TIMEOUT_MS)
    await failed.get_by_test_id("retry-turn").click()
    await expect(page.locator('article[data-role="assistant"]').last).to_contain_text(
        "Recovered: here is the answer.", timeout=TIMEOUT_MS
    )
    await shot(page, "image-turn-retried")
    retried = page.locator('article[data-role="user"]', has_text=FLAKY)
    await expect(retried).to_have_count(2)
    await expect(retried.last.locator("img.thumb")).to_have_count(1)
    assert script.asked[FLAKY] == 2
    assert script.images[-1] == 1, "the retry carried the image to the model"
    assert page.errors == []


async def test_on_a_touch_phone_every_dialog_row_shows_rename_and_delete_beside_its_title(
    replay_server: ServeProcess, data_dir: Path, page: Any
) -> None:
    from playwright.async_api import expect

    token = await token_for(data_dir)
    for title in ("A rather long dialog title about the trip to Rome", "Taxes", "Groceries"):
        await asyncio.to_thread(create_dialog, replay_server, token, title)
    cdp = await page.context.new_cdp_session(page)
    await cdp.send("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 5})
    await page.set_viewport_size({"width": 360, "height": 740})
    await log_in(page, replay_server, token)
    assert await page.evaluate("matchMedia('(hover: none)').matches")
    await page.get_by_test_id("sidebar-toggle").click()
    rows = page.get_by_test_id("session-row")
    await expect(rows).to_have_count(3)
    await page.wait_for_timeout(300)  # the drawer's slide
    await shot(page, "touch-phone-dialog-actions")
    for i in range(3):
        row = rows.nth(i)
        await expect(row.get_by_test_id("rename-dialog")).to_be_visible()
        await expect(row.get_by_test_id("delete-dialog")).to_be_visible()
        title, actions = await row.evaluate(
            """(el) => [el.querySelector('.session-title').getBoundingClientRect(),
                        el.querySelector('.session-actions').getBoundingClientRect()].map((r) => [r.left, r.right, r.width])"""
        )
        assert title[1] <= actions[0] + 0.5, f"row {i}: the actions cover the title"
        assert title[2] >= 120, f"row {i}: the title is squeezed to {title[2]} px"
    # Rename works from a row that is not the active one.
    await rows.nth(2).get_by_test_id("rename-dialog").click()
    await expect(page.get_by_test_id("rename-input")).to_be_visible()
    assert page.errors == []
