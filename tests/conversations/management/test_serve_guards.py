"""``manage.py serve`` as a real process: request bodies over the limit are refused while they
arrive (not after Daphne buffered them), and a worker that cannot start ends the process with
the reason and exit 1."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from urllib.parse import urlsplit

import pytest

from conversations.management.commands._http_guard import MAX_HTTP_BODY_BYTES
from tests.e2e.serve_process import REPO, ServeProcess, server_env

pytestmark = [pytest.mark.e2e]
CHUNK = b"x" * 65536


async def raw_request(url: str, head: bytes, body_chunks: int = 0, chunked: bool = False) -> bytes:
    """Send ``head`` (then up to ``body_chunks`` chunks of 64 KiB, stopping when the server closes)
    and read the answer until the server closes the connection."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(head)
    try:
        for _ in range(body_chunks):
            writer.write(b"10000\r\n" + CHUNK + b"\r\n" if chunked else CHUNK)
            await writer.drain()
    except (ConnectionError, OSError):
        pass  # refused: the server closed while we were sending
    answer = b""
    try:
        async with asyncio.timeout(10):
            while chunk := await reader.read(65536):
                answer += chunk
    except (ConnectionError, OSError):
        pass
    writer.close()
    return answer


def parse(answer: bytes) -> tuple[int, dict, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


async def test_bodies_over_the_limit_are_refused_before_they_are_read(tmp_path):
    async with ServeProcess(tmp_path) as server:
        post = "POST /api/dialogs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        huge = f"{post}Content-Length: 838860800\r\n\r\n".encode()
        # Declared too large: answered after the headers, without reading the 800 MB.
        for extra, chunks in ((b"", 4), (b"Expect: 100-continue\r\n", 0)):
            answer = await raw_request(
                server.url, huge.replace(b"\r\n\r\n", b"\r\n" + extra + b"\r\n", 1) if extra else huge, chunks
            )
            assert b"100 Continue" not in answer, "no invitation to send a body that is refused"
            status, headers, body = parse(answer)
            assert (status, body["code"]) == (413, "body_too_large") and len(body["ref"]) == 8
            assert (
                headers["Content-Type"] == "application/json; charset=utf-8"
                and headers["Connection"] == "close"
            )
            # Written outside Django, it still carries the security headers (README "Security").
            assert headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
            assert headers["X-Content-Type-Options"] == "nosniff" and headers["X-Frame-Options"] == "DENY"
        # Chunked (no length): refused once more than the limit has arrived.
        chunks = MAX_HTTP_BODY_BYTES // len(CHUNK) + 16
        answer = await raw_request(
            server.url, f"{post}Transfer-Encoding: chunked\r\n\r\n".encode(), chunks, chunked=True
        )
        assert parse(answer)[0] == 413
        # The OpenAI-compatible endpoint's clients read OpenAI's error shape, this answer included.
        answer = await raw_request(
            server.url,
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 838860800\r\n\r\n",
        )
        status, _, body = parse(answer)
        assert status == 413 and body["error"]["code"] == "request_too_large"
        assert body["error"]["type"] == "invalid_request_error" and "exceeds" in body["error"]["message"]
        # The server is fine, and bodies under the limit still reach the API (its own 413 over 1 MiB).
        health = await raw_request(
            server.url, b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        assert parse(health)[:1] == (200,)
        small = b'{"title": "' + b"x" * (2 * 1024 * 1024) + b'"}'
        answer = await raw_request(
            server.url, f"{post}Connection: close\r\nContent-Length: {len(small)}\r\n\r\n".encode() + small
        )
        status, _, body = parse(answer)
        assert (status, body["code"]) == (413, "body_too_large"), "the API's own 1 MiB limit"
        assert "exceeds 1048576 bytes" in body["message"]


@pytest.mark.parametrize(
    ("flags", "what"), [((), "agent worker failed to start"), (("--no-worker",), "could not start")]
)
async def test_serve_exits_1_with_the_reason_when_redis_is_unreachable(tmp_path, flags, what):
    env = server_env(tmp_path, {"PICOBOT_REDIS_URL": "redis://127.0.0.1:1/0"})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "manage.py",
        "serve",
        "--port",
        "0",
        *flags,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 1
    text = err.decode()
    assert text.startswith(f"CommandError: {what}: redis.exceptions.ConnectionError")
    assert "127.0.0.1:1" in text and "check PICOBOT_REDIS_URL" in text
    assert b"PicoBot is running" not in out, "never announced as running"
    assert b"API token" not in out
    with sqlite3.connect(tmp_path / "picobot.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM auth_user").fetchone()[0] == 0, (
            "the first-start user whose token was never shown is undone: the next start makes one"
        )


async def test_runagent_exits_1_with_one_line_when_redis_is_unreachable(tmp_path):
    env = server_env(tmp_path, {"PICOBOT_REDIS_URL": "redis://127.0.0.1:1/0"})
    migrate = await asyncio.create_subprocess_exec(
        sys.executable, "manage.py", "migrate", "-v", "0", cwd=REPO, env=env
    )
    assert await migrate.wait() == 0
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "manage.py",
        "runagent",
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 1
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1, err.decode()
    assert lines[0].startswith("CommandError: agent worker failed to start: redis.exceptions.ConnectionError")
    assert "check PICOBOT_REDIS_URL" in lines[0] and b"running" not in out
