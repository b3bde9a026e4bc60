"""http_fetch bodies the content-type check does not decide (QA 6, items 7 and 8): an untyped body
is text only when it is UTF-8; ``Content-Encoding: deflate`` may be raw DEFLATE (no zlib header),
still bounded by the size limit after decompression."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conversations.tools.http_fetch import fetch
from tests.conversations.tools.test_builtin_tools import PUBLIC_IP, fetch_tool, public_policy

NOT_UTF8 = bytes(range(128, 256)) * 64  # 8 KiB of high bytes, no NUL


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-15)
    return compressor.compress(data) + compressor.flush()


BODIES: dict[str, tuple[bytes, str | None, str | None]] = {
    # path: (body, content type, content encoding)
    "/untyped-binary": (NOT_UTF8, None, None),
    "/untyped-latin1": ("café au lait".encode("latin-1"), None, None),
    "/untyped-utf8": ("café 中文 😀".encode(), None, None),
    "/deflate-raw": (raw_deflate(b"hello raw deflate"), "text/plain", "deflate"),
    "/deflate-zlib": (zlib.compress(b"hello zlib deflate"), "text/plain", "deflate"),
    "/deflate-raw-bomb": (raw_deflate(b"b" * 2_000_000), "text/plain", "deflate"),
    "/deflate-corrupt": (b"\x00\x01\x02 not deflate at all", "text/plain", "deflate"),
}


@pytest.fixture
def base() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body, content_type, encoding = BODIES[self.path]
            self.send_response(200)
            if content_type:
                self.send_header("Content-Type", content_type)
            if encoding:
                self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((PUBLIC_IP, 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://{PUBLIC_IP}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("path", ["/untyped-binary", "/untyped-latin1"])
async def test_an_untyped_body_that_is_not_utf8_is_refused(base, path):
    outcome = await fetch_tool(f"{base}{path}")

    assert (outcome.is_error, outcome.content) == (
        True,
        "Error: the response has no content type and is not UTF-8 text; http_fetch returns text only",
    )


async def test_an_untyped_utf8_body_is_returned(base):
    outcome = await fetch_tool(f"{base}/untyped-utf8")

    assert outcome.is_error is False and outcome.content.endswith("café 中文 😀")


async def test_an_untyped_utf8_body_cut_inside_a_character_is_still_text(base):
    cut = len("café 中".encode()) - 1  # the limit ends inside 中
    result = await fetch(f"{base}/untyped-utf8", public_policy(), max_bytes=cut)

    assert result.truncated is True and result.text.startswith("café ")


@pytest.mark.parametrize(
    ("path", "text"), [("/deflate-raw", "hello raw deflate"), ("/deflate-zlib", "hello zlib deflate")]
)
async def test_deflate_is_read_with_or_without_the_zlib_header(base, path, text):
    outcome = await fetch_tool(f"{base}{path}")

    assert outcome.is_error is False, outcome.content
    assert outcome.content.endswith(text)


async def test_a_raw_deflate_bomb_is_bounded_after_decompression(base):
    result = await fetch(f"{base}/deflate-raw-bomb", public_policy(max_bytes=10_000))

    assert result.truncated is True and result.text == "b" * 10_000


async def test_a_corrupt_deflate_body_is_an_error_result(base):
    outcome = await fetch_tool(f"{base}/deflate-corrupt")

    assert (outcome.is_error, outcome.content) == (True, "Error: the server sent a corrupt compressed body")


@pytest.mark.parametrize("step", [1, 2, 3, 7])
@pytest.mark.parametrize("compress", [raw_deflate, zlib.compress])
def test_deflate_is_detected_however_the_body_is_cut_into_reads(step, compress):
    from conversations.tools.http_fetch.decoding import BodyReader

    data = compress(b"chunked deflate text " * 20)
    body = BodyReader("deflate", 100_000)
    for start in range(0, len(data), step):
        assert body.feed(data[start : start + step])

    assert body.bytes() == b"chunked deflate text " * 20
