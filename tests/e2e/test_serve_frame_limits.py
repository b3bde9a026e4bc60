"""The real ``manage.py serve`` against frames over its transport limit and invalid UTF-8
(PROTOCOL §1, issue 16 "Limits everywhere"), sent by a raw WebSocket client.

A message over 9 MiB gets the ``error`` frame ``frame_too_large`` and the socket stays open (it
used to be dropped: 1006); it is discarded while it arrives, so the server's peak memory does not
grow by its size. Invalid UTF-8 gets a close frame with 1007 (it used to be a TCP reset).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conversations.management.commands.serve import MAX_WS_MESSAGE_BYTES
from tests.e2e.raw_websocket import BINARY, CONTINUATION, TEXT, RawWebSocket
from tests.e2e.serve_process import ServeProcess, manage

pytestmark = [pytest.mark.e2e]

MIB = 1024 * 1024


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set size (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


@pytest.fixture
async def served(tmp_path: Path):
    """A running offline ``serve`` and a token of its user."""
    manage(tmp_path, "migrate", "--noinput")
    token = manage(tmp_path, "createtoken", "alice").strip().splitlines()[-1]
    async with ServeProcess(tmp_path) as server:
        yield server, token


async def open_socket(server: ServeProcess, token: str) -> RawWebSocket:
    ws = await RawWebSocket.connect(server.ws_url, token)
    await ws.recv_json("ready")
    return ws


async def still_answers(ws: RawWebSocket, nonce: str) -> None:
    await ws.send_text({"type": "ping", "nonce": nonce})
    pong = await asyncio.wait_for(ws.recv_json("pong"), 30)
    assert pong["nonce"] == nonce


async def test_a_100_mib_frame_gets_frame_too_large_and_the_socket_stays_open_with_memory_bounded(served):
    server, token = served
    ws = await open_socket(server, token)
    try:
        await still_answers(ws, "before")
        peak_before = peak_rss_bytes(server.proc.pid)
        await ws.send_streamed(TEXT, 100 * MIB)
        error = await asyncio.wait_for(ws.recv_json("error"), 120)
        assert error["code"] == "frame_too_large" and error["ref"]
        await still_answers(ws, "after")
        # Discarded as it streamed in: the peak grew by far less than the frame (autobahn alone
        # would have buffered the 100 MiB, had it not dropped the connection).
        assert peak_rss_bytes(server.proc.pid) - peak_before < 32 * MIB
    finally:
        ws.close()


async def test_a_fragmented_message_over_the_limit_is_discarded_and_the_next_one_is_served(served):
    server, token = served
    ws = await open_socket(server, token)
    try:
        piece = 4 * MIB  # three fragments: the third takes the message over 9 MiB
        await ws.send_streamed(TEXT, piece, fin=False)
        await ws.send_streamed(CONTINUATION, piece, fin=False)
        await ws.send_streamed(CONTINUATION, piece, fin=True)
        assert (await asyncio.wait_for(ws.recv_json("error"), 60))["code"] == "frame_too_large"
        await ws.send_streamed(BINARY, MAX_WS_MESSAGE_BYTES + 1)
        assert (await asyncio.wait_for(ws.recv_json("error"), 60))["code"] == "frame_too_large"
        await still_answers(ws, "after")
    finally:
        ws.close()


async def test_a_frame_under_the_transport_limit_still_gets_the_applications_error(served):
    server, token = served
    ws = await open_socket(server, token)
    try:
        await ws.send_streamed(TEXT, MAX_WS_MESSAGE_BYTES)  # not JSON, but within the limit
        error = await asyncio.wait_for(ws.recv_json("error"), 60)
        assert error["code"] == "frame_too_large" and "8 MiB" in error["message"]
        await still_answers(ws, "after")
    finally:
        ws.close()


@pytest.mark.parametrize("size", [64, 2 * MIB], ids=["small", "with-more-in-flight"])
async def test_invalid_utf8_in_a_text_frame_is_closed_with_1007_not_reset(served, size: int):
    server, token = served
    ws = await open_socket(server, token)
    try:
        payload = b'{"type": "ping", "nonce": "\xff\xfe"}'.ljust(size, b" ")
        await ws.send_frame(TEXT, payload)
        assert await asyncio.wait_for(ws.recv_close(), 30) == 1007
    finally:
        ws.close()
    (await open_socket(server, token)).close()  # the server goes on
