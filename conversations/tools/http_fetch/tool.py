"""The ``http_fetch`` tool: GET a web page as text, without reaching the server's own network.

:func:`fetch` follows at most ``policy.max_redirects`` redirects, checking every hop's URL
(``guard``), within one time limit for the whole fetch; the body is read up to the size limit
(``decoding``) and made text on a worker thread, so a big or hostile page never blocks the event
loop. The result names the final URL, status and content type, never other response headers.
:func:`http_fetch_tool` is the definition the registry runs (rules in ``tools/README.md``).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx2

from conversations.agent.tool_registry import Tool, ToolError
from conversations.tools.http_fetch.decoding import BodyReader, is_text_type, is_utf8, page_text
from conversations.tools.http_fetch.guard import GuardedBackend, GuardedTransport, check_url
from conversations.tools.http_fetch.policy import FetchPolicy

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "PicoBot-http_fetch/1 (+self-hosted LLM chat gateway)"

_PARSE_THREADS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="http_fetch-text")
"""Where page text is made, off the event loop (bounded: parsing holds the GIL, so more threads
would only take more of the loop's time)."""


async def page_text_off_loop(body: bytes, media_type: str, charset: str | None) -> str:
    """:func:`page_text` on a worker thread, so a big page never blocks the event loop: a time
    limit, ``/stop`` and other dialogs go on meanwhile. A cancelled wait stops the work early."""
    stop = threading.Event()
    future = asyncio.get_running_loop().run_in_executor(
        _PARSE_THREADS, page_text, body, media_type, charset, stop
    )
    try:
        return await future
    finally:
        stop.set()


@dataclass(frozen=True)
class FetchResult:
    """A fetched page: the final URL, status, media type, decoded text, and whether it was cut."""

    url: str
    status: int
    reason: str
    media_type: str
    text: str
    truncated: bool
    max_bytes: int
    redirects: int

    def render(self) -> str:
        """The tool result: a short header, a blank line, the text."""
        lines = [f"URL: {self.url}", f"Status: {self.status} {self.reason}".rstrip()]
        if self.media_type:
            lines.append(f"Content-Type: {self.media_type}")
        if self.redirects:
            lines.append(f"Redirects followed: {self.redirects}")
        if self.truncated:
            lines.append(
                f"Note: the body was longer than {self.max_bytes} bytes; only the first {self.max_bytes} were read."
            )
        return "\n".join(lines) + "\n\n" + self.text


async def fetch(url: str, policy: FetchPolicy, max_bytes: int | None = None) -> FetchResult:
    """GET ``url`` under ``policy`` (see the module docstring; touches the network).

    Args:
        url: an absolute http(s) URL.
        policy: limits and address rules.
        max_bytes: a lower body limit for this call (never above ``policy.max_bytes``).

    Raises:
        FetchRefused: the URL, a redirect target or an address is not allowed.
        ToolError: time limit, too many redirects, connection failure, non-text content.
    """
    limit = policy.max_bytes if max_bytes is None else max(1, min(max_bytes, policy.max_bytes))
    try:
        current = httpx2.URL(url.strip())
    except (httpx2.InvalidURL, TypeError, ValueError) as exc:
        raise ToolError(f"invalid URL: {exc}") from exc
    transport = GuardedTransport(GuardedBackend(policy))
    client = httpx2.AsyncClient(
        transport=transport,
        trust_env=False,
        follow_redirects=False,
        timeout=httpx2.Timeout(policy.timeout),
        headers={
            "User-Agent": USER_AGENT,
            "Accept": "text/*, application/json, */*;q=0.5",
            "Accept-Encoding": "gzip, deflate",
        },
    )
    try:
        async with asyncio.timeout(policy.timeout):
            return await _follow(client, current, policy, limit)
    except TimeoutError as exc:
        raise ToolError(f"http_fetch timed out after {policy.timeout:g} s") from exc
    finally:
        await client.aclose()


async def _follow(
    client: httpx2.AsyncClient, url: httpx2.URL, policy: FetchPolicy, limit: int
) -> FetchResult:
    for redirects in range(policy.max_redirects + 1):
        check_url(url)
        try:
            async with client.stream("GET", url) as response:
                location = response.headers.get("location")
                if response.status_code in REDIRECT_STATUSES and location:
                    try:
                        url = response.url.join(location)
                    except (httpx2.InvalidURL, ValueError) as exc:
                        raise ToolError("the server redirected to an invalid URL") from exc
                    continue
                return await _read(response, limit, redirects)
        except httpx2.TimeoutException as exc:
            raise ToolError(f"http_fetch timed out after {policy.timeout:g} s") from exc
        except httpx2.ConnectError as exc:
            raise ToolError(f"could not connect to {url.host}") from exc
        except httpx2.HTTPError as exc:
            raise ToolError(f"the request to {url.host} failed ({type(exc).__name__})") from exc
    raise ToolError(f"too many redirects (more than {policy.max_redirects})")


async def _read(response: httpx2.Response, limit: int, redirects: int) -> FetchResult:
    content_type = response.headers.get("content-type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type and not is_text_type(media_type):
        raise ToolError(f"the content type {media_type[:80]!r} is not text; http_fetch returns text only")
    body = BodyReader(response.headers.get("content-encoding", ""), limit)
    async for raw in response.aiter_raw():
        if not body.feed(raw):
            break
    data = body.bytes()
    if not media_type and not is_utf8(data, body.truncated):  # untyped: text only when it is UTF-8
        raise ToolError(
            "the response has no content type and is not UTF-8 text; http_fetch returns text only"
        )
    text = await page_text_off_loop(data, media_type, response.charset_encoding)
    return FetchResult(
        url=str(response.url),
        status=response.status_code,
        reason=response.reason_phrase,
        media_type=media_type,
        text=text,
        truncated=body.truncated,
        max_bytes=limit,
        redirects=redirects,
    )


def http_fetch_tool(policy: FetchPolicy | None = None) -> Tool:
    """The ``http_fetch`` tool definition (policy: default ``FetchPolicy.from_settings()``).

    Its own timeout is the fetch's time limit plus 2 s, so the fetch's clearer message wins.
    """
    policy = policy or FetchPolicy.from_settings()

    async def http_fetch(arguments: dict) -> str:
        result = await fetch(arguments["url"], policy, arguments.get("max_bytes"))
        return result.render()

    return Tool(
        name="http_fetch",
        description=(
            "Fetch a public web page or text resource by HTTP GET and return it as text (HTML is "
            "reduced to readable text). http/https only; private and local addresses are refused."
        ),
        parameters={
            "type": "object",
            "properties": {
                "url": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 2048,
                    "description": "Absolute http(s) URL.",
                },
                "max_bytes": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": policy.max_bytes,
                    "description": f"Read at most this many bytes of the body (default and maximum {policy.max_bytes}).",
                },
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        handler=http_fetch,
        timeout=policy.timeout + 2.0,
    )
