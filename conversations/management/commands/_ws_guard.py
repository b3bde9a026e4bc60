"""A bound on each WebSocket's unsent output for ``manage.py serve``'s Daphne (PROTOCOL §1).

Daphne writes every frame the application sends straight into the connection's Twisted
transport, which buffers whatever the peer does not read: a client that stops reading (a
suspended laptop, a stuck script) while it asks for ``history`` or watches long answers would
grow the process without limit. :func:`install_output_bound` makes every WebSocket check its
transport's unsent bytes before each frame: once more than ``max_unsent_bytes`` are waiting,
nothing more is queued, the socket gets a close frame with code :data:`CLOSE_NOT_READING` and,
since a peer that does not read will not read that frame either, is dropped after autobahn's
close handshake timeout (1 s): the client usually sees the connection drop (1006), the log says
4408. Its unsent bytes are released when it closes, and given back to the operating system
(:func:`give_back_freed_memory`: glibc keeps freed heap pages mapped until ``malloc_trim``). The
consumer sees an ordinary disconnect; nothing is lost, since what it was sent is in the database
and a reconnecting client resyncs from ``ready``. A frame always goes out whole when the buffer
is under the bound, so the unsent output of a socket stays under ``max_unsent_bytes`` plus one
frame. The bound is checked when a frame is sent; a socket that stops reading with less queued
is left to Daphne's ping timeout.

Snapshots of running turns are already bounded per connection by the ``seen`` credit window;
this bound covers everything else (``history`` answers, terminals, ``turn_committed``, notices).
A transport without Twisted's write buffer (TLS wrapped) is not bounded: PicoBot is meant to
run behind a proxy that terminates TLS (README, "Production").

The same protocol writes a frame of an open WebSocket straight to the socket when nothing is
waiting before it (:meth:`OutputBoundedWebSocketProtocol.sendData`): Twisted's ``write`` would
register the socket for writing and send on the next loop iteration, two ``epoll_ctl`` calls
and a loop pass per frame; what the kernel does not take is buffered by Twisted as before.

Import this module only after ``daphne.server`` (which installs Twisted's asyncio reactor).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time
from typing import Any

from autobahn.websocket.protocol import WebSocketProtocol as AutobahnProtocol
from daphne.ws_protocol import WebSocketProtocol

log = logging.getLogger(__name__)

CLOSE_NOT_READING = 4408
"""Close code for a client that left more than the bound of output unread (PROTOCOL §1)."""

TRIM_AFTER_BYTES = 1024 * 1024
"""A socket that closes with at least this much unsent output gives its memory back at once."""

_TRIM_INTERVAL_SECONDS = 1.0
_last_trim = 0.0


def _load_malloc_trim() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): the allocator returns memory itself
        return None


_malloc_trim = _load_malloc_trim()


def give_back_freed_memory() -> bool:
    """Return the heap's free pages to the operating system (glibc ``malloc_trim(0)``), at most
    once a second. Returns whether it ran (False without glibc or within the interval)."""
    global _last_trim
    now = time.monotonic()
    if _malloc_trim is None or now - _last_trim < _TRIM_INTERVAL_SECONDS:
        return False
    _last_trim = now
    _malloc_trim(0)
    return True


def unsent_bytes(transport: Any) -> int | None:
    """Bytes written to a Twisted TCP transport and not yet handed to the kernel; None when the
    transport has no such buffer (then nothing is bounded)."""
    buffered = getattr(transport, "dataBuffer", None)
    pending = getattr(transport, "_tempDataLen", None)
    if buffered is None or pending is None:
        return None
    return len(buffered) - getattr(transport, "offset", 0) + pending


class OutputBoundedWebSocketProtocol(WebSocketProtocol):
    """Daphne's WebSocket protocol, closing a socket whose peer leaves too much output unread."""

    max_unsent_bytes = 16 * 1024 * 1024
    _not_reading = False

    def serverSend(self, content: Any, binary: bool = False) -> None:  # noqa: N802 - Daphne's name
        if self._not_reading:
            return  # closing: nothing more is queued behind the close frame
        unsent = unsent_bytes(self.transport)
        if unsent is not None and unsent > self.max_unsent_bytes:
            self._not_reading = True
            log.warning(
                "WebSocket %s closed with %d: %d bytes of output unread (bound %d bytes)",
                _peer(self),
                CLOSE_NOT_READING,
                unsent,
                self.max_unsent_bytes,
            )
            self.sendClose(code=CLOSE_NOT_READING, reason="output not read")
            return
        super().serverSend(content, binary)

    def sendData(self, data: bytes, sync: bool = False, chopsize: int | None = None) -> None:  # noqa: N802
        """autobahn's ``sendData`` for a frame of an open socket, without its per-frame debug-log
        arguments, written at once when nothing is queued before it (see module)."""
        if sync or chopsize or self.send_queue or self.state != AutobahnProtocol.STATE_OPEN or self.logOctets:
            super().sendData(data, sync, chopsize)
            return
        self.trafficStats.outgoingOctetsWireLevel += len(data)
        transport = self.transport
        if (
            unsent_bytes(transport) == 0
            and transport.connected
            and not transport.disconnecting
            and not getattr(transport, "_writeDisconnected", True)
        ):
            written = transport.writeSomeData(data)
            if isinstance(written, int):
                data = data[written:]
        if data:
            transport.write(
                data
            )  # the rest, or all of it after an error (Twisted's write path then reports it)

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:  # noqa: N802 - autobahn's name
        # The transport and this protocol refer to each other: their unsent bytes would stay until
        # a full garbage collection. Drop them now (an aborted connection never sends them).
        transport = self.transport
        unsent = unsent_bytes(transport) if transport is not None else None
        if unsent and not getattr(transport, "connected", False):
            transport.dataBuffer, transport._tempDataBuffer, transport._tempDataLen, transport.offset = (
                b"",
                [],
                0,
                0,
            )
            if unsent >= TRIM_AFTER_BYTES or self._not_reading:
                give_back_freed_memory()
        super().onClose(wasClean, code, reason)


def _peer(protocol: Any) -> str:
    address = getattr(protocol, "client_addr", None)
    return f"{address[0]}:{address[1]}" if address else "?"


def install_output_bound(ws_factory: Any, max_unsent_bytes: int) -> None:
    """Make the WebSockets that ``ws_factory`` (Daphne's ``WebSocketFactory``) builds from now on
    bound their unsent output to ``max_unsent_bytes`` (0 or less: no bound)."""
    if max_unsent_bytes <= 0:
        return
    ws_factory.protocol = type(
        "OutputBoundedWebSocketProtocol",
        (OutputBoundedWebSocketProtocol,),
        {"max_unsent_bytes": max_unsent_bytes},
    )
