"""The cli_chat WebSocket of the terminal client (PROTOCOL §1 "Authentication", "A client must read").

``ChatConnection.run()`` connects with ``Authorization: Bearer <token>`` (``ws://`` or ``wss://``,
the system's CA store for TLS), hands every JSON frame to ``on_frame`` and reconnects after any
drop: 0.5 s doubling to 15 s with ±25 % jitter, so a restarted server is not hit by every client
at once. websockets' keepalive pings drop a half-open connection. A refusal — close code 4401, or
HTTP 401 (403 on the ``/ws/chat/`` path) at the handshake — ends ``run()`` in the ``refused``
state: retrying a bad token cannot help. Close code 4429 (too many failed sign-ins from this
address) waits at least the ``retry_after`` seconds of the ``error`` frame before it (Daphne
sends no close reason), else those its reason names (``close_retry_after``). Any other answer than a WebSocket upgrade at the
handshake, but a server error or "too many requests" (408, 429, 5xx: retried), ends it in
``not_found``: the URL points at no PicoBot WebSocket (PicoBot itself answers 403 on an unknown
WebSocket path, and an HTTP server 404 or 200). After each reconnect the server's ``ready`` lets
the store resync by revision.

States reported to ``on_state``: connecting, connected, reconnecting (``retry_in`` seconds,
``detail`` = why), refused, not_found (``detail`` = "HTTP <status>", ``status``), closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI

UNAUTHORIZED_CLOSE = 4401
TOO_MANY_FAILURES_CLOSE = 4429
MAX_FRAME_BYTES = 9 * 1024 * 1024  # server frames are at most 8 MiB (PROTOCOL §1)
BASE_DELAY = 0.5
MAX_DELAY = 15.0


@dataclass(frozen=True)
class ConnectionState:
    kind: str
    retry_in: float = 0.0
    attempt: int = 0
    detail: str = ""
    status: int = 0  # the HTTP status answered instead of the upgrade (refused, not_found)


def backoff_delay(attempt: int, rng: Callable[[], float] = random.random) -> float:
    """Seconds before reconnect ``attempt`` (0-based): 0.5 s × 2^attempt, at most 15 s, ±25 %."""
    return min(MAX_DELAY, BASE_DELAY * 2**attempt) * (0.75 + rng() * 0.5)


def close_retry_after(code: int | None, reason: str | None) -> float:
    """Seconds to wait at least before reconnecting after a close: for 4429 the ``retry in N s``
    of its reason (60 when it names none), else 0 (PROTOCOL §1)."""
    if code != TOO_MANY_FAILURES_CLOSE:
        return 0.0
    match = re.search(r"retry in (\d+) s", reason or "")
    return float(match.group(1)) if match else 60.0


def handshake_verdict(url: str, status: int) -> str:
    """What an HTTP ``status`` instead of the upgrade at ``url`` means: ``refused`` (the token:
    401, or 403 on the chat endpoint's path), ``retry`` (408, 429, 5xx: the server may recover),
    else ``not_found`` (no PicoBot WebSocket there)."""
    if status == 401 or (status == 403 and urlsplit(url).path.rstrip("/").endswith("/ws/chat")):
        return "refused"
    if status in (408, 429) or status >= 500:
        return "retry"
    return "not_found"


class ChatConnection:
    """One client's connection, reconnecting until ``close()`` or a refused token.

    ``on_frame(frame)`` is awaited for each decoded frame (a dict with ``type``; other text is
    skipped); ``on_state(state)`` is called on every change. ``send`` returns False while
    disconnected: the caller keeps what must survive (the store's pending messages).
    """

    def __init__(
        self,
        url: str,
        token: str,
        on_frame: Callable[[dict[str, Any]], Awaitable[None]],
        on_state: Callable[[ConnectionState], None],
        *,
        open_timeout: float = 10.0,
        ping_interval: float = 20.0,
        ping_timeout: float = 20.0,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.url, self.token = url, token
        self.on_frame, self.on_state = on_frame, on_state
        self.open_timeout, self.ping_interval, self.ping_timeout = open_timeout, ping_interval, ping_timeout
        self.rng = rng
        self.ws: ClientConnection | None = None
        self.attempt = 0
        self._closing = False
        self._wakeup = asyncio.Event()
        self._wait_at_least = 0.0  # seconds the last close asked for (4429)

    async def run(self) -> None:
        """Connect, read, reconnect; returns when refused or closed. Never raises for network
        errors (they become ``reconnecting``)."""
        while not self._closing:
            self.on_state(ConnectionState("connecting", attempt=self.attempt))
            try:
                reason = await self._session()
            except InvalidStatus as exc:
                status = exc.response.status_code
                verdict = handshake_verdict(self.url, status)
                if verdict != "retry":
                    self.on_state(ConnectionState(verdict, detail=f"HTTP {status}", status=status))
                    return
                reason = f"HTTP {status}"
            except InvalidURI as exc:
                self.on_state(ConnectionState("closed", detail=str(exc)))
                return
            except TimeoutError:
                reason = "no answer from the server"
            except OSError:
                reason = "server not reachable"
            except websockets.InvalidHandshake as exc:
                reason = str(exc) or type(exc).__name__
            if reason == "refused":
                self.on_state(ConnectionState("refused", detail="the server refused the token (4401)"))
                return
            if self._closing:
                break
            delay = max(backoff_delay(self.attempt, self.rng), self._wait_at_least)
            self._wait_at_least = 0.0
            self.attempt += 1
            self.on_state(
                ConnectionState("reconnecting", retry_in=delay, attempt=self.attempt, detail=reason)
            )
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), delay)
        self.on_state(ConnectionState("closed"))

    async def _session(self) -> str:
        """One connection until it drops; returns why ("refused" for close code 4401)."""
        async with connect(
            self.url,
            additional_headers={"Authorization": f"Bearer {self.token}"},
            open_timeout=self.open_timeout,
            ping_interval=self.ping_interval,
            ping_timeout=self.ping_timeout,
            max_size=MAX_FRAME_BYTES,
        ) as ws:
            self.ws = ws
            retry_after: int | None = None
            self.on_state(ConnectionState("connected"))
            try:
                async for message in ws:
                    frame = _decode(message)
                    if frame is None:
                        continue
                    if frame["type"] == "ready":
                        self.attempt = 0
                    if frame["type"] == "error" and isinstance(frame.get("retry_after"), int):
                        retry_after = frame["retry_after"]  # before a 4429 (Daphne sends no reason)
                    await self.on_frame(frame)
            except ConnectionClosed:
                pass
            finally:
                self.ws = None
            code = ws.close_code
        self._wait_at_least = close_retry_after(code, ws.close_reason)
        if code == TOO_MANY_FAILURES_CLOSE:
            if retry_after is not None and retry_after > 0:
                self._wait_at_least = float(retry_after)
            return f"too many failed sign-ins; retry in {self._wait_at_least:.0f} s"
        return "refused" if code == UNAUTHORIZED_CLOSE else f"connection closed ({code})"

    async def send(self, frame: dict[str, Any]) -> bool:
        """Send one frame; False when not connected (or the connection dropped meanwhile)."""
        ws = self.ws
        if ws is None:
            return False
        try:
            await ws.send(json.dumps(frame))
        except ConnectionClosed:
            return False
        return True

    def reconnect_now(self) -> None:
        """Skip the rest of the backoff wait (a user asked to retry)."""
        self._wakeup.set()

    async def close(self) -> None:
        """Stop reconnecting and close the socket; ``run()`` then returns."""
        self._closing = True
        self._wakeup.set()
        if self.ws is not None:
            await self.ws.close()


def _decode(message: str | bytes) -> dict[str, Any] | None:
    try:
        frame = json.loads(message)
    except ValueError:
        return None
    return frame if isinstance(frame, dict) and isinstance(frame.get("type"), str) else None
