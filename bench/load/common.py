"""Shared helpers: dialog tags, the chunk text scheme, /proc readings, loopback HTTP, stats."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
from pathlib import Path

try:  # orjson only if installed (it is not a requirement)
    import orjson

    def loads(data: str | bytes) -> object:
        return orjson.loads(data)

    def dumps(value: object) -> str:
        return orjson.dumps(value).decode()
except ImportError:  # pragma: no cover - depends on the environment
    loads = json.loads  # type: ignore[assignment]

    def dumps(value: object) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


REPO = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"

# --- dialog tags and chunk text ---------------------------------------------------------------
# The harness puts "[[bench:KEY]]" in each user message; the LLM server (and the Channels floor)
# key their chunk write times by KEY. Chunk k's text has a fixed width, so an answer of length L
# contains exactly chunks 0 .. L // CHUNK_WIDTH - 1.
TAG_RE = re.compile(r"\[\[bench:([A-Za-z0-9_.-]{1,60})\]\]")
CHUNK_WIDTH = 6


def tag(key: str) -> str:
    return f"[[bench:{key}]]"


def find_key(text: str) -> str | None:
    match = TAG_RE.search(text)
    return match.group(1) if match else None


def chunk_text(k: int) -> str:
    """Chunk ``k``'s delta: six characters, two of them non-ASCII (« and »), unique per k < 10 000."""
    return f"«{k % 10000:04d}»"


def full_text(chunks: int) -> str:
    return "".join(chunk_text(k) for k in range(chunks))


# --- /proc ------------------------------------------------------------------------------------
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds; 0.0 when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process in KiB (zeros when it is gone)."""
    out = {"VmRSS": 0, "VmHWM": 0}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in out:
            out[name] = int(value.split()[0])
    return out


# --- loopback networking ----------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


async def http_request(
    port: int, method: str, path: str, body: bytes = b"", timeout: float = 10
) -> tuple[int, bytes]:
    """One HTTP/1.1 request to 127.0.0.1:PORT with ``Connection: close``; (status, body)."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        try:
            head = (
                f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
                f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
    head_bytes, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head_bytes.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head_bytes.lower():
        payload = _dechunk(payload)
    return status, payload


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return bytes(out)


# --- statistics -------------------------------------------------------------------------------
def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (NaN when empty)."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, int(round(q / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[index]


def summary_ms(values: list[float]) -> dict[str, float]:
    """p50 / p99 / max of seconds, in milliseconds."""
    ordered = sorted(values)
    return {
        "p50": percentile(ordered, 50) * 1000,
        "p99": percentile(ordered, 99) * 1000,
        "max": (ordered[-1] * 1000) if ordered else float("nan"),
        "n": len(ordered),
    }
